-- test_blas_kernels.lua - which OpenBLAS kernels CPU products run (issue 29):
-- OpenBLAS 0.3.21 picks its kernels by processor model and falls back to its
-- Prescott SSE kernels on a model it does not know (the GPU machine's masked
-- "Intel(R) Xeon(R) Processor": a fifth of the rate), so ldist names the
-- family from the instruction sets, unless OPENBLAS_CORETYPE does. Each case
-- is a fresh ldist process (OpenBLAS chooses once, as it loads).
local T = dofile("tests/lua/testlib.lua")
local ldist_bin = arg and arg[-1] or "./ldist"

local function sh(cmd)
  local f = io.popen(cmd .. " 2>&1")
  local out = f:read("a")
  f:close()
  return out
end
local function blas(env)
  return sh(env .. " " .. ldist_bin .. " -e 'print(ldist.config.cpu_split().blas); print(os.getenv(\"OPENBLAS_CORETYPE\"))'")
end

-- what ldist should name here, from the kernel's view of the processor
local flags, vendor = {}, ""
for line in io.lines("/proc/cpuinfo") do
  if line:match("^flags") and not next(flags) then for f in line:gmatch("%S+") do flags[f] = true end end
  if line:match("^vendor_id") and vendor == "" then vendor = line:match(":%s*(%S+)") end
end
local expect
if flags.avx512f and flags.avx512bw and flags.avx512dq and flags.avx512vl then expect = "SkylakeX"
elseif flags.avx2 and flags.fma then expect = vendor == "AuthenticAMD" and "Zen" or "Haswell" end

T.test("by default ldist names the kernel family from the instruction sets", function()
  local out = blas("env -u OPENBLAS_CORETYPE -u LDIST_BLAS")
  T.ok(out:find("^OpenBLAS "), out)
  if not expect then print("# a processor without AVX2: OpenBLAS's own choice (skip)"); return end
  T.ok(out:find(expect .. " kernels (named by ldist from the processor's instruction sets", 1, true), out)
end)

T.test("the family is read once: processes ldist starts choose again (no OPENBLAS_CORETYPE inherited)", function()
  local out = blas("env -u OPENBLAS_CORETYPE -u LDIST_BLAS")
  T.ok(out:find("\nnil\n$"), "OPENBLAS_CORETYPE left set after loading: " .. out)
end)

T.test("OPENBLAS_CORETYPE set by the user wins", function()
  local out = blas("env -u LDIST_BLAS OPENBLAS_CORETYPE=Haswell")
  T.ok(out:find("Haswell kernels (OPENBLAS_CORETYPE)", 1, true), out)
  T.ok(out:find("\nHaswell\n$"), "the user's variable was changed: " .. out)
end)

T.test("products agree between the named kernels and OpenBLAS's SSE fallback", function()
  local prog = "tensor.seed(3); local a, b = tensor.normal(300, 200), tensor.normal(200, 260); " ..
    "local c = a:matmul(b); local d = a.T:contiguous().T:matmul(b); print(string.format('%.6f %.6f', c:sum():item(), (c - d):abs():max():item()))"
  local named = sh("env -u OPENBLAS_CORETYPE " .. ldist_bin .. " -e \"" .. prog .. "\"")
  local sse = sh("env OPENBLAS_CORETYPE=Prescott " .. ldist_bin .. " -e \"" .. prog .. "\"")
  local s1, s2 = tonumber(named:match("^(%S+)")), tonumber(sse:match("^(%S+)"))
  T.ok(s1 and s2, named .. " / " .. sse)
  T.ok(math.abs(s1 - s2) <= 1e-3 * math.max(1, math.abs(s2)), ("sums differ: %s vs %s"):format(s1, s2))
end)

T.done()
