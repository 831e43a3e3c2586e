-- wrk: POST /v1/personal-access-tokens, spread round-robin over the users in tokens.txt,
-- each request with a unique name. Env: BENCH_ORG, BENCH_WS, BENCH_TOKENS (file).
local tokens = {}
for line in io.lines(os.getenv("BENCH_TOKENS")) do tokens[#tokens + 1] = line end
local org, ws = os.getenv("BENCH_ORG"), os.getenv("BENCH_WS")
local counter = 0
thread_id = 0 -- set per thread by setup(); must stay global
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

function request()
  counter = counter + 1
  local token = tokens[(counter + thread_id * 7) % #tokens + 1]
  local body = string.format(
    '{"name":"wrk-%d-%d-%d","scopes":["activity:read"],"organisationId":"%s","workspaceIds":["%s"]}',
    thread_id, counter, math.random(1, 1000000000), org, ws)
  return wrk.format("POST", "/v1/personal-access-tokens",
    { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }, body)
end



function done(summary, latency, requests)
  local errors = summary.errors.status
  io.write(string.format("non-2xx responses: %d\n", errors))
end
