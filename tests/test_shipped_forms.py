"""benchmarks.shipped_forms_ab builds a database's best record in every form it takes between tuning and shipping
(CPU: compile only; the timing runs on the GPU)."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_form_of_a_tuned_record_builds_with_its_calling_convention():
    from benchmarks.shipped_forms_ab import forms_of
    from flashgemm.op.workloads import parse
    import os
    forms = forms_of(parse("vit-b16", "float16"), "sm_90", REPO / "flashgemm" / "databases", caps=(64,),
                     switches=("guarded", "exp-twice"))
    assert list(forms) == ["tuning", "static", "any_batch", "twin", "twin_scale", "twin@cap64", "tuning@guarded",
                           "twin@guarded", "twin_scale@guarded", "tuning@exp-twice", "twin@exp-twice",
                           "twin_scale@exp-twice"]
    # the tuning form takes (A, B, P) with scale a constant; the runtime forms strided operands and scale (the
    # scale-specialized twin takes the argument too, and ignores it)
    assert {name: runtime for name, (_, runtime) in forms.items()} == {
        "tuning": False, "static": True, "any_batch": True, "twin": True, "twin_scale": True, "twin@cap64": True,
        "tuning@guarded": False, "twin@guarded": True, "twin_scale@guarded": True, "tuning@exp-twice": False,
        "twin@exp-twice": True, "twin_scale@exp-twice": True}
    assert all(callable(fn) for fn, _ in forms.values())
    # the switched builds put their switches back
    assert "unguard_normalize" not in os.environ and "keep_exp_in_accumulator" not in os.environ
