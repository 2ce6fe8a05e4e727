-- test_gpu_plugin.lua - the CUDA plugin on a machine without a GPU (CI):
-- build/ldist_cuda.so compiled and linked, ldist starts anyway, lists only
-- CPU devices, says why in one line, and refuses cuda:0 with that line.
-- On a machine with a GPU the no-GPU checks turn into "cuda:0 is listed".
local T = dofile("tests/lua/testlib.lua")

local ldist_bin = arg and arg[-1] or "./ldist"
local plugin = "build/ldist_cuda.so"

local function sh(cmd)
  local f = io.popen(cmd .. " 2>&1")
  local out = f:read("a")
  local ok, _, code = f:close()
  return out, ok and 0 or code
end
local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local have_nvcc = sh("command -v nvcc || ls /usr/local/cuda/bin/nvcc") ~= ""
local have_driver = sh("ldconfig -p | grep -F 'libcuda.so.1 '") ~= ""
local note = tensor.device_note()
local has_gpu = note:match("^CUDA [%d.]+ driver, %d+ GPU") ~= nil

T.test("the plugin is built where nvcc is installed", function()
  if not have_nvcc then print("# no nvcc here: the plugin is not built (skip)"); return end
  T.ok(exists(plugin), plugin .. " is missing although nvcc is installed")
end)

T.test("the plugin links: no missing library, no undefined symbol", function()
  if not exists(plugin) then return end
  local out = sh("ldd -r " .. plugin)
  T.ok(not out:find("not found", 1, true), "ldd: " .. out)
  T.ok(not out:find("undefined symbol", 1, true), "ldd -r: " .. out)
  local syms = sh("nm -D --defined-only " .. plugin)
  T.ok(syms:find("ldist_cuda_plugin", 1, true), "ldist_cuda_plugin is not exported")
end)

T.test("the note is one line and names the problem", function()
  T.ok(#note > 0, "empty note")
  T.ok(not note:find("\n"), "note has several lines: " .. note)
  if exists(plugin) then
    T.ok(not note:find("did not load", 1, true) and not note:find("no CUDA plugin", 1, true)
      and not note:find("does not match", 1, true), "the plugin should have loaded: " .. note)
  end
  if not has_gpu and not have_driver and exists(plugin) then
    T.eq(note, "no CUDA driver: libcuda.so.1 not found")
  elseif not has_gpu then
    T.ok(note:find("CUDA") or note:find("GPU"), "note does not say what is missing: " .. note)
  end
end)

T.test("devices: only CPU without a GPU, cuda:0 with one", function()
  local devs = tensor.devices()
  T.eq(devs[1], "cpu:0")
  if has_gpu then
    local found = false
    for _, d in ipairs(devs) do found = found or d == "cuda:0" end
    T.ok(found, "a GPU answered but cuda:0 is not listed")
  else
    for _, d in ipairs(devs) do T.ok(d:match("^cpu:%d+$"), "unexpected device " .. d) end
  end
end)

T.test("help(tensor.devices) shows the note", function()
  tensor.devices()
  local text = ldist.doc_text(tensor.devices)
  T.ok(text and text:find(note, 1, true), "help text lacks the note: " .. tostring(text))
  T.ok(ldist.doc_text(tensor.device_note), "tensor.device_note has no help")
end)

T.test("a tensor moved to cuda:0 without a GPU: an error naming cuda:0 and the reason", function()
  if has_gpu then print("# a GPU answers here (skip)"); return end
  local err = T.raises(function() return tensor.ones(2):to("cuda:0") end, "cuda:0")
  T.ok(err:find(note, 1, true), "the error does not say why: " .. err)
  T.raises(function() return tensor.zeros(2, {device = "cuda:0"}) end, "cuda:0")
  T.raises(function() return distribute.MirroredStrategy{devices = {"cuda:0"}} end, "cuda:0")
  -- the session goes on
  T.eq(tensor.ones(2):sum():item(), 2)
end)

T.test("MirroredStrategy without a GPU picks the CPU devices", function()
  if has_gpu then return end
  local s = distribute.MirroredStrategy()
  for _, d in ipairs(s.devices) do T.ok(d:match("^cpu:"), "unexpected device " .. d) end
end)

T.test("a fresh ldist starts and says the same; LDIST_CUDA_PLUGIN overrides the search", function()
  local out, code = sh(ldist_bin .. " -e 'print(tensor.device_note()); print(#tensor.devices())'")
  T.eq(code, 0, "ldist failed to start: " .. out)
  T.ok(out:find(note, 1, true), "another note in a fresh process: " .. out)
  out = sh("LDIST_CUDA_PLUGIN= " .. ldist_bin .. " -e 'print(tensor.device_note())'")
  T.ok(out:find("CUDA turned off", 1, true), out)
  out, code = sh("LDIST_CUDA_PLUGIN=/nonexistent/ldist_cuda.so " .. ldist_bin ..
    " -e 'print(tensor.device_note()); print(tensor.devices()[1])'")
  T.eq(code, 0, out)
  T.ok(out:find("the CUDA plugin did not load", 1, true) and out:find("cpu:0", 1, true), out)
end)

-- Without a driver the plugin found by the search is not even opened (12 MB
-- of static cudart: a slower start for nothing); one named by
-- LDIST_CUDA_PLUGIN is opened and says the same line.
T.test("no driver: the searched plugin stays closed, a named one says the same", function()
  if have_driver or has_gpu or not exists(plugin) then
    print("# a driver is installed here, or no plugin is built (skip)"); return
  end
  local probe = "' tensor.devices(); local m = 0 for l in io.lines(\"/proc/self/maps\") do " ..
    "if l:find(\"ldist_cuda.so\", 1, true) then m = m + 1 end end print(tensor.device_note(), m)'"
  local out, code = sh(ldist_bin .. " -e " .. probe)
  T.eq(code, 0, out)
  T.eq(out, "no CUDA driver: libcuda.so.1 not found\t0\n")
  out, code = sh("LDIST_CUDA_PLUGIN=" .. plugin .. " " .. ldist_bin .. " -e " .. probe)
  T.eq(code, 0, out)
  T.ok(out:match("^no CUDA driver: libcuda.so.1 not found\t[1-9]%d*\n$"), "the named plugin: " .. out)
end)

-- A plugin built against another kernel table (an older ldist, before a kernel
-- was added): the same entry point, another ABI or another kernel count. It is
-- refused with a note that says so, and ldist runs on the CPU.
T.test("a stale plugin (another ABI, or built before a kernel was added) is refused", function()
  local dir = os.tmpname(); os.remove(dir); assert(os.execute("mkdir -p " .. dir))
  local function fake(name, abi, kernels)
    local src = dir .. "/" .. name .. ".c"
    local f = assert(io.open(src, "w"))
    f:write(([[
#include "cuda/ld_cuda.h"
static int init(const ld_cuda_host *h, char *note, size_t n) { (void)h; (void)note; (void)n; return 1; }
static const ld_cuda_plugin table = { %s, %s, sizeof(ld_backend), init };
__attribute__((visibility("default"))) const ld_cuda_plugin *ldist_cuda_plugin(void) { return &table; }
]]):format(abi, kernels))
    f:close()
    local so = dir .. "/" .. name .. ".so"
    local out, code = sh(("cc -shared -fPIC -Iengine -o %s %s"):format(so, src))
    T.eq(code, 0, "cannot build the fake plugin: " .. out)
    return so
  end
  local cases = {
    { fake("old_abi", "LD_CUDA_ABI - 1", "LD_KERNEL_COUNT"), "another interface version" },
    { fake("one_kernel_less", "LD_CUDA_ABI", "LD_KERNEL_COUNT - 1"), "built for %d+ kernels, this ldist has %d+" },
  }
  for _, c in ipairs(cases) do
    local out, code = sh("LDIST_CUDA_PLUGIN=" .. c[1] .. " " .. ldist_bin ..
      " -e 'print(tensor.device_note()); print(table.concat(tensor.devices(), \",\"))'")
    T.eq(code, 0, out)
    T.ok(out:find("does not match this ldist", 1, true) and out:find(c[2]) and out:find("rebuild it with make", 1, true),
      "the stale plugin's note: " .. out)
    T.ok(not out:find("cuda:", 1, true), "a stale plugin registered a device: " .. out)
  end
  os.execute("rm -rf " .. dir)
end)

T.done()
