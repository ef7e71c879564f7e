-- bench/lua/count_with.sh's loop: count_with.lua side n [key] runs n
-- acquire+release pairs on COUNT_URI (default: a SQLite file of
-- LEASELOCK_BENCH_TMP) after a warm-up, through lock:with (side "lua", the default options, as
-- bench_with.lua) or through the C core alone (side "core", the
-- leaselock_bench module). One side per process: the other module is not
-- even loaded, so a run's instructions are its side's.
local side, n, key = arg[1], tonumber(arg[2]), arg[3] or "bench/count"
local tmp = os.getenv("LEASELOCK_BENCH_TMP") or "/tmp"
local uri = os.getenv("COUNT_URI")
if not uri or uri == "" then
  uri = ("sqlite://%s/count-%s-%s.db"):format(tmp, jit and "jit" or "54", side)
end
local function noop() return true end
if side == "lua" then
  local client = assert(require("leaselock").connect(uri, { label = "bench" }))
  local lock = client:lock(key)
  for _ = 1, 100 do assert(lock:with(noop)) end
  for _ = 1, n do assert(lock:with(noop)) end
  client:close()
elseif side == "core" then
  local core = assert(require("leaselock_bench").core(uri))
  assert(core:pairs(key, 100))
  assert(core:pairs(key, n))
  core:close()
else
  error("side: lua or core")
end
