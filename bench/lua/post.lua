-- wrk script: POST the JSON body in the file named by $BENCH_BODY.
-- $BENCH_HEADERS: optional extra headers, "Name: value" separated by "|".
-- bench/bench.py writes the body files from bench/bodies/*.json.
local path = os.getenv("BENCH_BODY")
local f = assert(io.open(path, "rb"), "BENCH_BODY: cannot open " .. tostring(path))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local extra = os.getenv("BENCH_HEADERS") or ""
for name, value in string.gmatch(extra, "([^:|]+):%s*([^|]*)") do
  wrk.headers[name] = value
end
