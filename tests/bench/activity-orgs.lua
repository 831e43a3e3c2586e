-- wrk: GET /v1/workspaces/{ws}/activity, the organisations taking turns request by request in
-- each thread, so that every organisation is asked about all through the run. Env:
-- BENCH_TOKENS and BENCH_WORKSPACES, space-separated, one token and its workspace per
-- organisation, in the same order. Answers outside 2xx are counted by count.lua, loaded from
-- this script's folder.
dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "count.lua")

local function words(s)
  local list = {}
  for w in string.gmatch(s or "", "%S+") do list[#list + 1] = w end
  return list
end

local requests, turn = {}, 0

function init(args)
  local tokens, workspaces = words(os.getenv("BENCH_TOKENS")), words(os.getenv("BENCH_WORKSPACES"))
  assert(#tokens > 0 and #tokens == #workspaces, "BENCH_TOKENS and BENCH_WORKSPACES: one of each per organisation")
  -- Formatted once: request() only picks the next one.
  for i, token in ipairs(tokens) do
    requests[i] = wrk.format("GET", "/v1/workspaces/" .. workspaces[i] .. "/activity",
      { ["Authorization"] = "Bearer " .. token, ["Host"] = wrk.headers["Host"] })
  end
end

function request()
  turn = turn % #requests + 1
  return requests[turn]
end
