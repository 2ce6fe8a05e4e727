-- tests/engine/layering.lua - the engine's layers point down (issue 28):
-- every file of engine/ (and engine/net/) includes only headers of its own
-- layer or of layers below it. A file missing from the map below is an error
-- too: a new file says where it belongs. Run by tests/lua/test_engine_layering.sh (the lua tier).
--   0 core        tensors, devices, kernels and their CPU backend, the
--                 executor and thread pools, the replica context, the tape's
--                 types (a tensor owns its autograd node)
--   1 ops         ops and their gradients
--   2 collectives the strategies' collectives between devices (ld_strategy)
--   3 models      layers, models, optimizers; data, files, images, events
--   4 network     the cluster between processes (engine/net/)
local LEVEL = {}
local function at(level, names) for _, n in ipairs(names) do LEVEL[n] = level end end
at(0, { "ld_core", "ld_tensor", "ld_device", "ld_kernels", "ld_executor", "ld_replica", "ld_autograd.h",
  "ld_cpu", "ld_cpu_internal", "ld_cpu_simd", "ld_cpu_attn", "ld_cpu_conv", "ld_cpu_index", "ld_cpu_image", "ld_cpu_norm", "ld_cpu_pool",
  "ld_pool", "ld_cpu_isa", "ld_cpu_conv_avx512", "ld_cpu_conv_avx2", "ld_cpu_gemm_small", "ld_gemm_bf16", "ld_cpu_half", "ld_half", "ld_norm_math", "ld_image_math", "ld_attn_math", "ld_elementwise_math", "ld_optim_math",
  "cuda/ld_cuda" })
at(1, { "ld_ops", "ld_ops_internal", "ld_ops_attn", "ld_ops_index", "ld_ops_pool", "ld_ops_conv", "ld_ops_norm", "ld_ops_image", "ld_autograd.c" })
at(2, { "ld_strategy" })
at(3, { "ld_nn", "ld_layers_core", "ld_layers_norm", "ld_layers_seq", "ld_layers_shape", "ld_layers_conv", "ld_layers_image", "ld_layer_options",
  "ld_optim", "ld_optim_state", "ld_data", "ld_data_text", "ld_image", "ld_io", "ld_io_tfevents", "ld_file" })
local NAMES = { "core", "ops", "collectives", "models", "network" }

local function level_of(path)   -- "engine/ld_ops.c" -> 1
  local rel = path:gsub("^engine/", "")
  if rel:match("^net/") then return 4 end
  local base = rel:gsub("%.[ch]$", "")
  return LEVEL[rel] or LEVEL[base]
end

local files = {}
for f in io.popen("ls engine/*.c engine/*.h engine/net/*.c engine/net/*.h engine/cuda/*.h 2>/dev/null"):lines() do
  files[#files + 1] = f
end
local bad, checked = {}, 0
for _, f in ipairs(files) do
  local lf = level_of(f)
  if not lf then
    bad[#bad + 1] = f .. " is in no layer: add it to tests/engine/layering.lua"
  else
    local dir = f:match("^(.*)/")
    for line in io.lines(f) do
      local h = line:match('^%s*#%s*include%s+"([^"]+)"')
      if h then
        local path = io.open(dir .. "/" .. h) and (dir .. "/" .. h) or ("engine/" .. h)
        local lh = level_of(path)
        checked = checked + 1
        if lh and lh > lf then
          bad[#bad + 1] = ("%s (%s) includes %s (%s, a layer above)"):format(f, NAMES[lf + 1], h, NAMES[lh + 1])
        end
      end
    end
  end
end
print(("%s - every engine file includes headers of its layer or below (%d files, %d includes)")
  :format(#bad == 0 and checked > 50 and "ok" or "not ok", #files, checked))
for _, b in ipairs(bad) do print("# " .. b) end
os.exit(#bad == 0 and 0 or 1)
