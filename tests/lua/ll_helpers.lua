-- Shared by the busted specs: the backends to run against, a sleep, a
-- child interpreter, and a small round-robin coroutine scheduler.
local M = {}

local tmp = os.getenv("LEASELOCK_TEST_TMP") or "/tmp"

-- A name unique to this run (keys and SQLite files never collide across
-- runs, interpreters or backends sharing a server).
M.run_id = ("%d%04d"):format(os.time(), math.random(0, 9999))

-- SQLite always; each server whose URI variable is set.
function M.backends()
  local list = {
    { name = "sqlite", uri = ("sqlite://%s/lua-%s-%s.db"):format(tmp, M.run_id,
        (jit and "jit" or "54")) },
  }
  for _, v in ipairs { { "mongodb", "MONGODB_URI" }, { "mysql", "MYSQL_URI" },
                       { "postgresql", "POSTGRESQL_URI" } } do
    local uri = os.getenv(v[2])
    if uri and uri ~= "" then list[#list + 1] = { name = v[1], uri = uri } end
  end
  return list
end

local counter = 0
function M.key(what)
  counter = counter + 1
  return ("lua/%s/%s/%s/%d"):format(jit and "jit" or "54", M.run_id, what, counter)
end

function M.sleep(seconds)
  os.execute(("sleep %.3f"):format(seconds))
end

-- The interpreter running the specs, for child processes.
function M.interpreter()
  local i = -1
  while arg and arg[i - 1] do i = i - 1 end
  return (arg and arg[i]) or (jit and "luajit" or "lua5.4")
end

-- Runs a Lua chunk in a child interpreter with the same package.cpath;
-- returns a popen handle reading its stdout (and its stderr too when
-- with_stderr is true).
function M.spawn(code, env, with_stderr)
  local prefix = ""
  for k, v in pairs(env or {}) do prefix = prefix .. ("%s='%s' "):format(k, v) end
  local script = ("package.cpath=%q\n%s"):format(package.cpath, code)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(script)
  f:close()
  return assert(io.popen(("%s%s %s%s; rm -f %s"):format(prefix, M.interpreter(), path,
    with_stderr and " 2>&1" or "", path)))
end

-- Runs the functions as coroutines, round robin, until all have returned.
-- Raises a coroutine's error. max_steps guards against a scheduler that
-- would never end.
function M.run_coroutines(fns, max_steps)
  local cos = {}
  for i, fn in ipairs(fns) do cos[i] = coroutine.create(fn) end
  local steps, alive = 0, #cos
  while alive > 0 do
    alive = 0
    for _, co in ipairs(cos) do
      if coroutine.status(co) ~= "dead" then
        local ok, err = coroutine.resume(co)
        if not ok then error(err, 0) end
        if coroutine.status(co) ~= "dead" then alive = alive + 1 end
      end
    end
    steps = steps + 1
    if steps > (max_steps or 100000) then error("coroutines did not finish") end
  end
  return steps
end

-- What a coroutine does to wait for a lock without blocking the thread:
-- try, and yield to the others between tries.
function M.acquire_yielding(lock)
  while true do
    local lease, msg, code = lock:try_acquire()
    if lease then return lease end
    if code ~= "BUSY" then return nil, msg, code end
    coroutine.yield()
  end
end

return M
