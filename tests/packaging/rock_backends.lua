-- After a rock build (make test-packaging): the installed module loads,
-- takes a lease on SQLite, and each other backend is either compiled in
-- (its URI is not refused as UNSUPPORTED) or left out and refused with
-- UNSUPPORTED and a message naming the library to install.
-- usage: lua5.4 rock_backends.lua sqlite:///path/x.db "sqlite mongodb ..."
local ll = require "leaselock"
local uri, expected = arg[1], arg[2]
assert(uri and expected, "usage: rock_backends.lua SQLITE_URI 'BACKEND...'")

local c = assert(ll.connect(uri))
local fence = assert(c:lock("rock-backends"):with(function(lease) return lease.fence end))
assert(c:info("rock-backends").fence == fence)
c:close()

local want = {}
for name in expected:gmatch("%S+") do want[name] = true end
assert(want.sqlite, "sqlite must be among the expected backends")

-- Nothing listens on port 1: a compiled-in backend fails (or connects
-- lazily), but never with UNSUPPORTED.
local others = {
  { "mongodb", "mongodb://127.0.0.1:1/leaselock?serverSelectionTimeoutMS=500&connectTimeoutMS=500",
    "libmongoc" },
  { "mysql", "mysql://u:p@127.0.0.1:1/leaselock", "libmariadb" },
  { "postgresql", "postgresql://u:p@127.0.0.1:1/leaselock?connect_timeout=1", "libpq" },
}
local failed = 0
for _, o in ipairs(others) do
  local name, ouri, lib = o[1], o[2], o[3]
  local client, msg, code = ll.connect(ouri)
  if client then client:close() end
  local ok, what
  if want[name] then
    ok = code ~= "UNSUPPORTED"
    what = ("compiled in (%s)"):format(client and "connected lazily" or tostring(code))
  else
    ok = code == "UNSUPPORTED" and type(msg) == "string" and msg:find(lib, 1, true) ~= nil
    what = ("left out: %s: %s"):format(tostring(code), tostring(msg))
  end
  print(("%s %s: %s"):format(ok and "ok:" or "FAIL:", name, what))
  if not ok then failed = failed + 1 end
end
print(("rock %s for %s: sqlite fence %s"):format(ll._VERSION, _VERSION, tostring(fence)))
os.exit(failed == 0 and 0 or 1)
