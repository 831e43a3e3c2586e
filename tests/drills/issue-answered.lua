-- wrk, for tests/drills/batch-crash.sh: tests/bench/issue.lua's unkeyed token issuance, plus a
-- record of every answer it got: the name of each token answered 2xx (or "?" when the answer
-- names none) goes to DRILL_ANSWERED-<thread>.txt, one a line, written at once so a run cut
-- short loses nothing. The drill then checks each of those tokens was committed.
dofile("tests/bench/issue.lua")

local prefix = os.getenv("DRILL_ANSWERED")
local counted = response -- the response() issue.lua brought (tests/bench/count.lua's), if any
local out = nil

function response(status, headers, body)
  if counted then counted(status, headers, body) end
  if status < 200 or status > 299 then return end
  if not out then
    out = assert(io.open(prefix .. "-" .. thread_id .. ".txt", "a"))
    out:setvbuf("line")
  end
  out:write((body:match('"name"%s*:%s*"(wrk%-[^"]+)"') or "?") .. "\n")
end
