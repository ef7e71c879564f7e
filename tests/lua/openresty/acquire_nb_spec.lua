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
    assert.same({ 0.01, 0.03, 0.04, 0.02 }, (function()
      local r = {}
      for i, s in ipairs(sleeps) do r[i] = math.floor(s * 1000 + 0.5) / 1000 end
      return r
    end)())
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

  it("checks its arguments", function()
    local function err(...)
      local ok, e = pcall(pool_try, ...)
      assert.is_false(ok)
      return e
    end
    assert.matches("bad argument #1 to '_pool_try' %(client id: number expected, got string%)",
      err("x", "k", 1000, 0, true, false))
    assert.matches("client id must be an integer from 1 to 2%^53", err(1.5, "k", 1000, 0, true, false))
    assert.matches("client id must be an integer from 1 to 2%^53", err(0, "k", 1000, 0, true, false))
    assert.matches("bad argument #2 to '_pool_try' %(key must be 1 to 255 bytes",
      err(1, "", 1000, 0, true, false))
    assert.matches("bad argument #3 to '_pool_try' %(ttl_ms must be an integer from 1 to 2592000000%)",
      err(1, "k", 0, 0, true, false))
    assert.matches("bad argument #4 to '_pool_try' %(min_hold_ms must be an integer from 0",
      err(1, "k", 1000, -1, true, false))
    assert.matches("bad argument #5 to '_pool_try' %(auto_renew: boolean expected, got no value%)",
      err(1, "k", 1000, 0))
    assert.matches("bad argument #6 to '_pool_try' %(on_renew_failed: boolean expected, got number%)",
      err(1, "k", 1000, 0, true, 1))
    assert.matches("bad argument #1 to '_pool_try' %(no leaselock.client has this id%)",
      err(2 ^ 40, "k", 1000, 0, true, false))
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
