-- wrk: GET /v1/workspaces/{ws}/activity with one token. Env: BENCH_TOKEN, BENCH_WS.
-- Answers outside 2xx are counted by count.lua, loaded from this script's folder.
dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "count.lua")
local token, ws = os.getenv("BENCH_TOKEN"), os.getenv("BENCH_WS")
wrk.method = "GET"
wrk.path = "/v1/workspaces/" .. ws .. "/activity"
wrk.headers["Authorization"] = "Bearer " .. token
