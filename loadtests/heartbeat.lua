-- wrk script: every request is one paired device's heartbeat, the devices taken in turn
-- from the file `tether-loadtest --wrk-out FILE` wrote (a device token, a tab, its body).
--   wrk -t2 -c256 -d20s -s loadtests/heartbeat.lua URL/api/devices/self/heartbeat -- FILE
local devices = {}
local next_device = 0

function init(args)
  for line in io.lines(args[1]) do
    local token, body = line:match("^([^\t]+)\t(.*)$")
    if token then
      devices[#devices + 1] = { token = token, body = body }
    end
  end
  next_device = math.random(#devices) - 1
end

function request()
  next_device = next_device % #devices + 1
  local device = devices[next_device]
  return wrk.format("POST", nil, {
    ["Authorization"] = "Bearer " .. device.token,
    ["Content-Type"] = "application/json",
    ["x-tether-protocol"] = "1",
  }, device.body)
end

function done(summary, latency, requests)
  io.write(string.format("wrk: %d requests, %d errors (status %d, timeout %d), p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
    summary.requests, summary.errors.status + summary.errors.timeout + summary.errors.connect + summary.errors.read + summary.errors.write,
    summary.errors.status, summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
