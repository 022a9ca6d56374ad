# tiles: (warpgroups, chunk columns, stages[, ping-pong[, producer warp]])
for tile in [(2,64,2),(2,64,2,1),(2,64,2,0,1),(2,64,2,1,1),(2,64,3,1,1),(2,128,2,1,1),(3,64,2,1,1)]:
    add("float16", True, False, "none", False, 128, tile)
    add("float16", True, False, "none", True, 128, tile)
for tile in [(2,128,3),(2,128,3,1),(2,128,3,1,1),(2,128,2,1,1),(3,64,3,1,1),(1,64,2),(1,64,3,0,1)]:
    add("float16", True, False, "none", False, 64, tile)
add("float16", False, False, "none", False, 64, (2,128,3,1,1))
add("bfloat16", True, False, "none", False, 128, (2,64,2,1,1))
add("float16", True, True, "add", False, 64, (2,128,3,1,1))
add("bfloat16", False, False, "bool", True, 64, (2,128,2,1,1))
add("float16", True, False, "add", True, 128, (2,64,2,1,1))
add("float16", True, False, "add", True, 128, (2,64,2,1))
