-- After `luarocks make`: the installed module loads and takes a lease,
-- and finds each backend module named (installed beside it): nothing
-- listens on port 1 of loopback, so a loaded module fails to connect
-- (BACKEND), where a missing one would answer UNSUPPORTED (make
-- test-luarock runs it for each rock and prints the tally).
-- usage: lua5.4|luajit rock_smoke.lua sqlite:///path/x.db [BACKEND...]
local ll = require "leaselock"
local uri = assert(arg[1], "usage: rock_smoke.lua URI [BACKEND...]")
local c = assert(ll.connect(uri))
local fence = assert(c:lock("rock"):with(function(lease) return lease.fence end))
assert(c:info("rock").fence == fence)
c:close()
for i = 2, #arg do
  local client, msg, code = ll.connect(arg[i] .. "://u:p@127.0.0.1:1/leaselock?connect_timeout=1")
  if client then client:close() end
  assert(code ~= "UNSUPPORTED", ("%s: %s"):format(arg[i], tostring(msg)))
end
print(("ok: luarocks make installed leaselock %s for %s (%s)"):format(ll._VERSION,
  jit and jit.version or _VERSION, package.searchpath("leaselock", package.cpath)))
