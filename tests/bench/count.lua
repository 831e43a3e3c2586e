-- wrk: counts every answer outside 200..299, by status, in each thread, and prints the counts
-- with wrk's socket errors at the end, in the lines tests/bench/lib.sh checks before it reports
-- a figure. wrk's own count (summary.errors.status, and its "Non-2xx or 3xx responses" line)
-- only sees statuses above 399, so a 3xx would pass it.
--
-- Alone, it is the script of a run with no script of its own (the bare handler):
--   wrk ... -s tests/bench/count.lua http://127.0.0.1:18090/
-- The other scripts load it first (dofile) and, if they define setup() themselves, call
-- count_setup(thread) from it.

bad = {} -- this thread's answers outside 2xx: status -> count (global: done() reads it by thread:get)
local threads = {}

function count_setup(thread)
  threads[#threads + 1] = thread
end

function setup(thread)
  count_setup(thread)
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    bad[status] = (bad[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local total, by = 0, {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("bad") or {}) do
      by[status] = (by[status] or 0) + n
      total = total + n
    end
  end
  local statuses = {}
  for status in pairs(by) do statuses[#statuses + 1] = status end
  table.sort(statuses)
  local parts = {}
  for _, status in ipairs(statuses) do parts[#parts + 1] = string.format("%d=%d", status, by[status]) end
  io.write(string.format("answers outside 2xx: %d (%s), from %d threads\n", total,
    #parts > 0 and table.concat(parts, " ") or "none", #threads))
  local e = summary.errors
  io.write(string.format("socket errors: connect %d, read %d, write %d, timeout %d\n",
    e.connect, e.read, e.write, e.timeout))
end
