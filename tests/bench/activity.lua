-- wrk: GET /v1/workspaces/{ws}/activity with one token. Env: BENCH_TOKEN, BENCH_WS.
local token, ws = os.getenv("BENCH_TOKEN"), os.getenv("BENCH_WS")
wrk.method = "GET"
wrk.path = "/v1/workspaces/" .. ws .. "/activity"
wrk.headers["Authorization"] = "Bearer " .. token

function done(summary, latency, requests)
  io.write(string.format("non-2xx responses: %d\n", summary.errors.status))
end
