-- lock:acquire_nb outside nginx (make test-lua54, make test-luajit): the
-- sleep option stands in for ngx.sleep; the backoff, the timeout and the
-- argument errors. Under real nginx: test_openresty.sh.
local leaselock = require "leaselock"
local H = require "ll_helpers"

describe("lock:acquire_nb", function()
  local client, sleeps
  local function fake_sleep(s) sleeps[#sleeps + 1] = s end

  before_each(function()
    client = assert(leaselock.connect(H.backends()[1].uri))
    sleeps = {}
  end)
  after_each(function() client:close() end)

  it("takes a free lock at once, without sleeping", function()
    local lease = assert(client:lock(H.key("nb")):acquire_nb { sleep = fake_sleep })
    assert.is_true(lease:held())
    assert.equals(0, #sleeps)
    assert(lease:release())
  end)

  it("backs off by step * ratio up to max_step and times out with TIMEOUT", function()
    local key = H.key("nb")
    local holder = assert(client:lock(key):try_acquire())
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
    local holder = assert(client:lock(key):try_acquire())
    local lease, msg, code = client:lock(key):acquire_nb { timeout = 0, sleep = fake_sleep }
    assert.is_nil(lease)
    assert.equals("busy", msg)
    assert.equals("BUSY", code)
    assert.equals(0, #sleeps)
    assert(holder:release())
  end)

  it("gets the lock when the holder releases during the wait", function()
    local key = H.key("nb")
    local holder = assert(client:lock(key):try_acquire())
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
    assert.matches("calling 'acquire_nb' on bad self",
      select(2, pcall(lock.acquire_nb, 5, { sleep = fake_sleep })))
  end)
end)
