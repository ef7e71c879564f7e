-- After `luarocks make`: the installed module loads and takes a lease.
-- usage: lua5.4 rock_smoke.lua sqlite:///path/x.db
local ll = require "leaselock"
local uri = assert(arg[1], "usage: rock_smoke.lua URI")
local c = assert(ll.connect(uri))
local fence = assert(c:lock("rock"):with(function(lease) return lease.fence end))
assert(c:info("rock").fence == fence)
c:close()
print(("ok: luarocks make installed leaselock %s (%s)"):format(ll._VERSION, package.searchpath("leaselock", package.cpath)))
print("1 passed, 0 failed")
