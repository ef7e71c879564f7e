-- lock:acquire_nb outside nginx (make test-lua54, make test-luajit): the
-- sleep option stands in for ngx.sleep; the backoff, the timeout and the
-- argument errors. Then a stand-in ngx whose run_worker_thread calls the
-- module function in this same VM: the tries in a thread pool, their
-- leases parked and adopted, and released when nobody adopts them. Under
-- real nginx: test_openresty.sh.
local leaselock = require "leaselock"
local H = require "ll_helpers"

describe("lock:acquire_nb", function()
  local client, other, sleeps
  local function fake_sleep(s) sleeps[#sleeps + 1] = s end

  before_each(function()
    client = assert(leaselock.connect(H.backends()[1].uri))
    -- the holder the waits wait for (this coroutine's would be refused)
    other = assert(leaselock.connect(H.backends()[1].uri))
    sleeps = {}
  end)
  after_each(function()
    client:close()
    other:close()
  end)

  it("takes a free lock at once, without sleeping", function()
    local lease = assert(client:lock(H.key("nb")):acquire_nb { sleep = fake_sleep })
    assert.is_true(lease.held)
    assert.equals(0, #sleeps)
    assert(lease:release())
  end)

  it("backs off by step * ratio up to max_step and times out with TIMEOUT", function()
    local key = H.key("nb")
    local holder = assert(other:lock(key):try_acquire())
    local lease, msg, code = client:lock(key):acquire_nb {
      timeout = 0.1, step = 0.01, ratio = 3, max_step = 0.04, sleep = fake_sleep }
    assert.is_nil(lease)
    assert.equals("TIMEOUT", code)
    assert.matches("timed out", msg)
    -- Each sleep is at most the knobs' (0.01, 0.03, 0.04, 0.04, ...; the
    -- core may ask for shorter: a waiter next for the key polls often),
    -- at least 1 ms, and they add up to the timeout.
    local bound, sum = 0.01, 0
    for i, s in ipairs(sleeps) do
      assert.is_true(s >= 0.001 - 1e-9 and s <= bound + 1e-9, ("sleep %d: %s"):format(i, s))
      bound, sum = math.min(bound * 3, 0.04), sum + s
    end
    assert.is_true(math.abs(sum - 0.1) < 0.0011, tostring(sum))
    assert(holder:release())
  end)

  it("timeout = 0 tries once: nil, 'busy', 'BUSY'", function()
    local key = H.key("nb")
    local holder = assert(other:lock(key):try_acquire())
    local lease, msg, code = client:lock(key):acquire_nb { timeout = 0, sleep = fake_sleep }
    assert.is_nil(lease)
    assert.equals("busy", msg)
    assert.equals("BUSY", code)
    assert.equals(0, #sleeps)
    assert(holder:release())
  end)

  it("gets the lock when the holder releases during the wait", function()
    local key = H.key("nb")
    local holder = assert(other:lock(key):try_acquire())
    local lease = assert(client:lock(key):acquire_nb { sleep = function(s)
      fake_sleep(s)
      if #sleeps == 3 then assert(holder:release()) end
    end })
    assert.equals(3, #sleeps)
    assert.is_true(lease.fence > holder.fence)
    assert(lease:release())
  end)

  it("raises on bad options", function()
    local lock = client:lock(H.key("nb"))
    local function err(opts)
      local ok, e = pcall(lock.acquire_nb, lock, opts)
      assert.is_false(ok)
      return e
    end
    assert.matches("bad argument #1 to 'acquire_nb' %(step must be a finite number > 0",
      err { step = 0, sleep = fake_sleep })
    assert.matches("ratio must be a finite number >= 1", err { ratio = 0.5, sleep = fake_sleep })
    assert.matches("max_step must be a finite number > 0",
      err { max_step = math.huge, sleep = fake_sleep })
    assert.matches("timeout must be", err { timeout = -1, sleep = fake_sleep })
    assert.matches("timeout must be", err { timeout = 0 / 0, sleep = fake_sleep })
    assert.matches("step: number expected, got string", err { step = "x", sleep = fake_sleep })
    assert.matches('unknown option "tmeout"', err { tmeout = 1, sleep = fake_sleep })
    assert.matches("table expected, got number", err(5))
    if not ngx then
      assert.matches("no ngx.sleep outside OpenResty", err {})
    end
    assert.matches("sleep: function expected", err { sleep = 1 })
    assert.matches("bad argument #1 to 'acquire_nb' %(pool: string expected, got number%)",
      err { pool = 5, sleep = fake_sleep })
    assert.matches("calling 'acquire_nb' on bad self",
      select(2, pcall(lock.acquire_nb, 5, { sleep = fake_sleep })))
  end)
end)

describe("leaselock.pool._pool_try", function()
  local pool = require "leaselock.pool"  -- internal: out of the module table
  local pool_try = pool._pool_try

  it("is not in the module table", function()
    assert.is_nil(rawget(leaselock, "_pool_try"))
    assert.is_nil(rawget(leaselock, "_pool_reap"))
  end)

  it("has a companion that reaps and counts what is parked", function()
    local n = pool._pool_reap()
    assert.equals("number", type(n))
    assert.is_true(n >= 0)
  end)

  it("checks its argument", function()
    local function err(...)
      local ok, e = pcall(pool_try, ...)
      assert.is_false(ok)
      return e
    end
    assert.matches("bad argument #1 to '_pool_try' %(wait id: number expected, got string%)",
      err("x"))
    assert.matches("wait id must be an integer from 1 to 2%^53", err(1.5))
    assert.matches("wait id must be an integer from 1 to 2%^53", err(0))
    -- A wait that is not (or no longer) registered: GONE, a busy try.
    local id, msg, code = pool_try(2 ^ 40)
    assert.is_nil(id)
    assert.equals("GONE", code)
    assert.matches("given up", msg)
  end)
end)

-- A stand-in for OpenResty: run_worker_thread calls the module function
-- here, as nginx would in a pool thread's VM (the module's C registry is
-- the same either way); its `hook` may replace the call.
local function fake_ngx()
  local f = { time = 1000, sleeps = {}, runs = 0 }
  f.sleep = function(s)
    f.sleeps[#f.sleeps + 1] = s
    f.time = f.time + s
  end
  f.now = function() return f.time end
  f.update_time = function() end
  f.run_worker_thread = function(pool, mod, fn, ...)
    f.runs = f.runs + 1
    f.pool = pool
    if f.hook then return f.hook(pool, mod, fn, ...) end
    return pcall(require(mod)[fn], ...)
  end
  return f
end

for _, b in ipairs(H.backends()) do
  describe("lock:acquire_nb with a stand-in ngx on " .. b.name, function()
    local client, other, fake
    local server = b.name ~= "sqlite"

    before_each(function()
      client = assert(leaselock.connect(b.uri))
      other = assert(leaselock.connect(b.uri))
      fake = fake_ngx()
      rawset(_G, "ngx", fake)
    end)
    after_each(function()
      rawset(_G, "ngx", nil)
      client:close()
      other:close()
    end)

    local function held(key)
      local rec = assert(other:info(key))
      return rec.owner ~= nil and rec.expires_in > 0
    end

    it(server and "makes each try in the pool and adopts its lease" or "makes each try here",
      function()
        local key = H.key("nbpool")
        local lease = assert(client:lock(key, { ttl = 10 }):acquire_nb { pool = "llnb" })
        assert.equals(server and 1 or 0, fake.runs)
        if server then assert.equals("llnb", fake.pool) end
        assert.is_true(lease.held)
        assert.equals(key, lease.key)
        assert.is_true(held(key))
        assert(lease:renew())
        assert(lease:release())
        assert.is_false(held(key))
        -- The default pool; a busy key; the wait bounded by the clock.
        local holder = assert(other:lock(key):try_acquire())
        local got, msg, code = client:lock(key):acquire_nb { timeout = 0.05, step = 0.01 }
        assert.is_nil(got)
        assert.equals("TIMEOUT", code)
        assert.matches("held by another owner", msg)
        if server then assert.equals("default", fake.pool) end
        assert(holder:release())
      end)

    it("releases an adopted lease when it is collected, like any other", function()
      local key = H.key("nbpool")
      local lease = assert(client:lock(key, { on_renew_failed = function() end }):acquire_nb())
      assert.is_true(held(key))
      assert.is_true(lease.held)
      lease = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      assert.is_false(held(key))
    end)

    if not server then return end

    it("counts a full pool as a busy try and says so", function()
      local key = H.key("nbpool")
      fake.hook = function() return false, "no available Lua vm" end
      local lease, msg, code = client:lock(key):acquire_nb { timeout = 0 }
      assert.is_nil(lease)
      assert.equals("TIMEOUT", code)
      assert.matches('thread pool "default" has no room %(no available Lua vm%)', msg)
      lease, msg, code = client:lock(key):acquire_nb { timeout = 0.02, step = 0.01 }
      assert.is_nil(lease)
      assert.equals("TIMEOUT", code)
      assert.matches("has no room", msg)
      assert.is_true(#fake.sleeps >= 2)
      -- Room again at the third try: the wait goes on and takes the lock.
      local n = 0
      fake.hook = function(pool, mod, fn, ...)
        n = n + 1
        if n < 3 then return false, "ngx_thread_task_post failed" end
        return pcall(require(mod)[fn], ...)
      end
      lease = assert(client:lock(key):acquire_nb { timeout = 1 })
      assert.equals(3, n)
      assert(lease:release())
    end)

    it("raises for a pool that does not exist or a failing pool function", function()
      local lock = client:lock(H.key("nbpool"))
      fake.hook = function(pool) return false, "thread pool " .. pool .. " not found" end
      local ok, e = pcall(lock.acquire_nb, lock, { pool = "nope" })
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'acquire_nb' %(pool: no thread pool \"nope\" %(nginx.conf", e)
      fake.hook = function() return false, "boom" end
      ok, e = pcall(lock.acquire_nb, lock)
      assert.is_false(ok)
      assert.matches('acquire_nb: thread pool "default": boom', e)
      fake.hook = nil
      rawset(fake, "run_worker_thread", nil)
      ok, e = pcall(lock.acquire_nb, lock)
      assert.is_false(ok)
      assert.matches("acquire_nb: no ngx.run_worker_thread", e)
      client:close()
      ok, e = pcall(lock.acquire_nb, lock)
      assert.is_false(ok)
      assert.matches("attempt to use a closed leaselock.client %(in 'acquire_nb'%)", e)
    end)

    -- The request ends while its try runs in the pool: the try's lease is
    -- parked and nobody adopts it.
    local function abandon(c, key)
      fake.hook = function(pool, mod, fn, ...)
        local ok, id = pcall(require(mod)[fn], ...)
        assert(ok and id, id)
        coroutine.yield() -- never resumed: nginx dropped the request
      end
      local co = coroutine.create(function() c:lock(key, { ttl = 30 }):acquire_nb() end)
      assert(coroutine.resume(co))
      fake.hook = nil
      assert.is_true(held(key))
    end

    it("releases a parked lease at client:close()", function()
      local key = H.key("nbpool")
      abandon(client, key)
      assert(client:close())
      assert.is_false(held(key))
    end)

    it("releases a parked lease when the client is collected", function()
      local key = H.key("nbpool")
      local c = assert(leaselock.connect(b.uri))
      abandon(c, key)
      c = nil
      collectgarbage()
      collectgarbage()
      assert.is_false(held(key))
    end)

    it("releases a parked lease at the next pool try once it is 5 s old", function()
      local key = H.key("nbpool")
      abandon(client, key)
      H.sleep(4)
      assert(client:lock(H.key("nbpool")):acquire_nb { timeout = 0 }):release()
      assert.is_true(held(key))
      H.sleep(1.2)
      assert(client:lock(H.key("nbpool")):acquire_nb { timeout = 0 }):release()
      assert.is_false(held(key))
      assert(client:lock(key):acquire_nb { timeout = 0 }):release()
    end)
  end)
end

-- acquire_nb is a waiter like a blocking acquire (the core's
-- leaselock_wait_*): its busy tries claim the key's reservation, and with
-- `fair` it keeps its place in the key's queue. Real processes hold and
-- queue; the tries run here (SQLite) or in the stand-in's pool (servers).
for _, b in ipairs(H.backends()) do
  describe("lock:acquire_nb as a waiter on " .. b.name, function()
    local client, other
    local function real_sleep(s) H.sleep(s) end

    before_each(function()
      client = assert(leaselock.connect(b.uri))
      other = assert(leaselock.connect(b.uri))
      rawset(_G, "ngx", fake_ngx())
    end)
    after_each(function()
      rawset(_G, "ngx", nil)
      client:close()
      other:close()
    end)

    -- A child process that runs body (Lua text, `lock` its lock of key)
    -- after printing "go" once it holds the key first (or at once when
    -- first is false).
    local function child(key, opts, body)
      return H.spawn(([[
        local leaselock = require "leaselock"
        local c = assert(leaselock.connect(%q))
        local lock = c:lock(%q, %s)
        %s
        c:close()
      ]]):format(b.uri, key, opts, body))
    end

    it("is not starved by two workers looping on the key", function()
      local key = H.key("nbloop")
      local stop = os.tmpname() -- the workers loop until it is gone
      local loop = ([[
        local limit = os.time() + 30
        local function go_on() local f = io.open(%q) if f then f:close() end return f end
        local l = assert(lock:acquire { timeout = 10 })
        io.write("go\n") io.flush()
        while true do
          os.execute("sleep 0.1") -- holds it a moment
          l:release()
          if not go_on() or os.time() > limit then break end
          l = assert(lock:acquire { timeout = 10 })
        end
        io.write("done\n")
      ]]):format(stop)
      local w1 = child(key, "{ ttl = 10 }", loop)
      assert.equals("go", w1:read("*l"))
      local w2 = child(key, "{ ttl = 10 }", loop)
      H.sleep(0.3) -- both loop: one holds, the other waits
      local lease, msg, code = client:lock(key, { ttl = 10 }):acquire_nb {
        timeout = 3, sleep = real_sleep }
      os.remove(stop)
      local released = lease and lease:release()
      local out1, out2 = w1:read("*a"), w2:read("*a")
      w1:close()
      w2:close()
      assert(lease, tostring(msg) .. " " .. tostring(code))
      assert.is_true(released)
      assert.matches("done", out1) -- the workers were looping all along
      assert.matches("done", out2)
    end)

    it("with fair, does not take the key ahead of a fair queue", function()
      local key = H.key("nbfair")
      local holder = assert(other:lock(key, { ttl = 30 }):try_acquire())
      -- Three fair waiters queue in turn; each but the first polls as one
      -- behind until the one before it holds, which lets the key go at
      -- once: a try that does not queue would take the key in such a gap.
      local body = [[
        local l = assert(lock:acquire { timeout = 15 })
        io.write(("fence %d\n"):format(l.fence)) io.flush()
        l:release()
      ]]
      local queued = {}
      for i = 1, 3 do
        queued[i] = child(key, "{ ttl = 10, fair = true }", body)
        H.sleep(0.4) -- it waits in the queue
      end
      -- A one-try fair acquire_nb is refused while they are queued.
      local lock = client:lock(key, { ttl = 10, fair = true })
      local lease, _, code = lock:acquire_nb { timeout = 0 }
      assert.is_nil(lease)
      assert.equals("BUSY", code)
      -- A waiting one queues behind them: the key goes to them first.
      local released = false
      lease = assert(lock:acquire_nb { timeout = 10, max_step = 0.005, sleep = function(s)
        if not released then released = assert(holder:release()) end
        real_sleep(s)
      end })
      local mine = lease.fence
      assert(lease:release()) -- a child it went ahead of gets the key then
      local fences = {}
      for i = 1, 3 do
        local line = queued[i]:read("*l")
        queued[i]:close()
        fences[i] = tonumber(line and line:match("^fence (%d+)$"))
        assert(fences[i], tostring(line))
      end
      assert.is_true(mine > math.max(fences[1], fences[2], fences[3]),
        ("acquire_nb got fence %d, the queued waiters %d, %d and %d"):format(mine, fences[1],
          fences[2], fences[3]))
    end)
  end)
end
