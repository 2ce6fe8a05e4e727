-- lua_bindings/lua/prelude.lua - the prelude's manifest: the Lua files the
-- ldist program runs at start-up, in this order, each called with the ldist
-- module table (the C modules already in it). One line per file: its path
-- under lua_bindings/lua/ and what it needs from C or from the files above
-- it. scripts/embed.lua embeds the files in this order and refuses a .lua
-- file of the folder that is missing here; tests/lua/prelude_audit.lua runs
-- them in this order to check that no file replaces another's function.
return {
  -- private helpers, one copy each (ldist._util)
  { "util.lua", needs = "tensor" },
  -- ui: help, progress bars, plots, the notebook's display
  { "ui/help.lua", needs = "docs, repr, isatty, termsize, walltime, _listdir (state.c)" },
  { "ui/progress.lua", needs = "docs, isatty, termsize, walltime (state.c)" },
  { "ui/plot.lua", needs = "io, isatty, termsize; fills util.nice_ticks" },
  { "ui/display.lua", needs = "walltime, util (html_escape), ui/progress" },
  -- TF's array ops composed of the engine's (einsum, tile, split, ...)
  { "tensor_ops.lua", needs = "tensor, util (check_opts), ui/help (document)" },
  -- data: ready-made data sets, image folders
  { "data/datasets.lua", needs = "data, io, tensor, ui/help" },
  { "data/images.lua", needs = "data, io, _image (skipped without them), data/datasets" },
  -- keras: metrics and model:compile/fit/evaluate/predict, layer options,
  -- functional models and saving, callbacks
  { "keras/training.lua", needs = "tensor, nn, util, ui/help; fills util.as_dataset, util.is_arrays, util.nest" },
  { "keras/scores.lua", needs = "tensor, util (check_opts, metric_kit), ui/help, keras/training (metrics)" },
  { "keras/layer_options.lua", needs = "nn, ui/help" },
  { "keras/models.lua", needs = "nn, tensor, json, io, losses, optim, util, keras/training (metrics)" },
  { "keras/mixed_precision.lua", needs = "nn, optim, ui/help (document)" },
  { "keras/preprocessing.lua", needs = "nn (_layer_methods), tensor, ui/help (document)" },
  { "keras/callbacks.lua", needs = "tensor, ui/progress, ui/help; a strategy's _is_writer at fit time" },
  -- distribute: the strategy protocol, then each strategy and what it builds on
  { "distribute/protocol.lua", needs = "tensor, optim, nn, data, _distribute, util (nest), ui/help" },
  { "distribute/timeline.lua", needs = "_cluster, io, util (nice_ticks), distribute/protocol" },
  { "distribute/mirrored.lua", needs = "_distribute, data, io, util (dedupe, nest), distribute/protocol" },
  { "distribute/cluster.lua", needs = "_cluster (skipped without it), distribute/protocol" },
  { "distribute/shipping.lua", needs = "_cluster, distribute/cluster" },
  { "distribute/multiworker.lua", needs = "_cluster, _distribute, util (dedupe, nest), distribute/shipping" },
  { "distribute/local_cluster.lua", needs = "_cluster, json, util, ui/progress, keras/callbacks, distribute/multiworker" },
  { "distribute/backup_restore.lua", needs = "io, util, keras/callbacks; a strategy's _is_writer and _broadcast" },
  { "distribute/ps_tasks.lua", needs = "_cluster, _distribute, util (nest), distribute/local_cluster" },
  { "distribute/parameter_server.lua", needs = "_cluster, util, distribute/ps_tasks" },
}
