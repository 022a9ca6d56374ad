#!/usr/bin/env python3
"""Check every kernel of a built bundle on this machine: one run each against the FP64 reference.

  flashgemm-check-bundle build/sm_90                                  # numerics of every kernel
  flashgemm-check-bundle build/sm_90 --sanitizer memcheck,racecheck  # the same under compute-sanitizer

With --sanitizer, each tool runs this script once over the whole bundle (compute-sanitizer --error-exitcode 1,
so any out-of-bounds access, misaligned access or shared-memory race fails it) and its log is kept in --log-dir.
Exit status: 0 when every kernel matched the reference (and every sanitizer run was clean), else 1.
"""
import argparse
import os
import shutil
import subprocess
import sys


from flashgemm.cli.usage import ArgumentParser

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", help="a bundle directory written by flashgemm-build (manifest.json + kernels .so)")
    ap.add_argument("--only", default=None,
                    help="only functions whose name this regular expression matches somewhere in "
                         "(e.g. _k64, or 'len.*_k64$' for the any-length kernels of K 64)")
    ap.add_argument("--sanitizer", default="", help=f"comma-separated compute-sanitizer tools ({', '.join(TOOLS)})")
    ap.add_argument("--log-dir", default=None, help="where sanitizer logs go (default: the bundle directory)")
    args = ap.parse_args(argv)
    tools = [t for t in args.sanitizer.split(",") if t]
    if set(tools) - set(TOOLS):
        ap.error(f"--sanitizer: unknown tools {sorted(set(tools) - set(TOOLS))}", fix=f"choose from {', '.join(TOOLS)}")
    if tools:
        exe = shutil.which("compute-sanitizer")
        if exe is None:
            ap.error("compute-sanitizer not found on PATH", fix="it ships with the CUDA toolkit: add its bin/ to PATH")
        log_dir = args.log_dir or args.bundle
        os.makedirs(log_dir, exist_ok=True)
        status = 0
        for tool in tools:
            log = os.path.join(log_dir, f"sanitizer-{tool}.log")
            cmd = [exe, "--tool", tool, "--error-exitcode", "1", "--log-file", log, sys.executable,
                   "-m", __spec__.name, args.bundle] + (["--only", args.only] if args.only else [])
            rc = subprocess.run(cmd).returncode
            with open(log) as fh:
                summary = [line.strip() for line in fh if "ERROR SUMMARY" in line or "RACECHECK SUMMARY" in line]
            print(f"compute-sanitizer {tool}: exit {rc}; {'; '.join(summary) or 'no summary line'} (log {log})")
            status |= rc != 0
        return int(status)

    from flashgemm.bundle.bundle_check import check_bundle  # noqa: PLC0415
    with ap.errors(FileNotFoundError, ValueError, RuntimeError):
        results = check_bundle(args.bundle, args.only)
    bad = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(bad)} of {len(results)} kernels match the reference")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
