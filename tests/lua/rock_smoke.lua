-- After `luarocks make`: the installed module loads and takes a lease
-- (make test-luarock runs it for each rock and prints the tally).
-- usage: lua5.4|luajit rock_smoke.lua sqlite:///path/x.db
local ll = require "leaselock"
local uri = assert(arg[1], "usage: rock_smoke.lua URI")
local c = assert(ll.connect(uri))
local fence = assert(c:lock("rock"):with(function(lease) return lease.fence end))
assert(c:info("rock").fence == fence)
c:close()
print(("ok: luarocks make installed leaselock %s for %s (%s)"):format(ll._VERSION,
  jit and jit.version or _VERSION, package.searchpath("leaselock", package.cpath)))
