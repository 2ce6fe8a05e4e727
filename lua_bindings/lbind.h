/*
 * lbind.h - helpers shared by the Lua binding files (not a public API).
 *
 * Tensors are full userdata holding one reference to an ld_tensor; the
 * metatable is "ldist.Tensor". Engine failures become Lua errors through
 * lb_check / lb_push_tensor_or_error, which read like Lua's own:
 *     bad argument #1 to 'matmul' (shapes 3x4 and 5x6 do not match)
 */
#ifndef LBIND_H
#define LBIND_H

#include <lua.h>
#include <lauxlib.h>
#include "ld_tensor.h"

#define LB_TENSOR_MT "ldist.Tensor"

/* The tensor at idx, or a Lua argument error naming `idx`. */
ld_tensor *lb_check_tensor(lua_State *L, int idx);
ld_tensor *lb_test_tensor(lua_State *L, int idx);   /* NULL when not a tensor */
ld_tensor *lb_check_tensor_raw(lua_State *L, int idx);   /* a pending weight gradient stays pending */
/* The tensors at idx, a list of them (or, with single_ok, one tensor), into
   an array anchored in a userdata pushed on the stack; returns how many.
   Raises "bad argument #argn (item i is a T, not a tensor)". */
int lb_check_tensors(lua_State *L, int idx, int argn, int single_ok, ld_tensor ***out);
/* A tensor from a tensor, a number or a (nested) table of numbers. Returns a
   new reference (release it). */
ld_tensor *lb_to_tensor(lua_State *L, int idx, ld_dtype dt);
/* Push t (takes ownership of the reference). t == NULL raises the engine's
   error message as an argument error of argument `arg` (0: a plain error). */
void lb_push_tensor(lua_State *L, ld_tensor *t, int arg);
/* Raise the engine's last error as an argument error (arg > 0) or plain error. */
int lb_engine_error(lua_State *L, int arg);
/* Register a module's functions as fields of the table at the top of the stack
   and record its docstrings: docs is a NULL-terminated list of name/text pairs. */
void lb_set_docs(lua_State *L, const char *prefix, const char *const *docs);

/* Keras's per-weight options of layers (nn_options.c): set option `key` of
   l from the value at vidx (0 when l's class has no such option; raises on
   a bad value); push every option set into the table at t; nn._weight_option. */
struct ld_layer;
int lb_layer_weight_option(lua_State *L, struct ld_layer *l, const char *key, int vidx);
/* a tensor made by tensor.Variable (trainable or not), at idx */
int lb_is_variable(lua_State *L, int idx);
#ifdef LD_NN_H
/* an initializer or a constraint (a name, {class_name=, config=} or an object) at idx; raises naming `what` */
void lb_read_initializer(lua_State *L, int idx, ld_initializer *out, const char *what);
void lb_read_constraint(lua_State *L, int idx, ld_constraint *out, const char *what);
#endif
void lb_layer_push_weight_options(lua_State *L, struct ld_layer *l, int t);
/* layer.kernel_regularizer and the like: pushes the option (nil: the class's default) and
   returns 1, or 0 when l's class has no such option */
int lb_layer_get_weight_option(lua_State *L, struct ld_layer *l, const char *key);
void lb_weight_options_register(lua_State *L, int mod);

/* Call the prelude's hook ldist.<module>.<name> with the nargs values on top
   of the stack (popped); no results. A hook that is not defined (a prelude
   without that module) is skipped: returns 0, else 1. Errors propagate. */
int lb_call_hook(lua_State *L, const char *module, const char *name, int nargs);

/* lua_pcall(L, nargs, nres, 0) for a C function that raises the error again
   (lua_error) once it has cleaned up: the traceback shown for it then has the
   frames where it was raised (state.c, ldist._keep_traceback). */
int lb_pcall_kept(lua_State *L, int nargs, int nres);
/* The string at idx, which the running C function raises next, reports the
   error an lb_pcall_kept in this same function kept (its text is in it, as
   "map function: <error>"): the kept frames go with it. */
void lb_kept_follow(lua_State *L, int idx);

/* Devices (distribute.c): a Lua array of 1..LD_MAX_LOGICAL distinct device
   names at idx into devs; returns how many, or raises an argument error. */
struct ld_device;
/* The pressure hook ran a full collection (an allocation failed): the
   collector's pace for device memory halves from then on (tensor.c). */
void lb_collector_pressure(void);
/* model:fit's steps (tensor.c): with on, the collections that device
   tensors call for wait for lb_collector_step, at a step's end; returns the
   previous setting (off again runs a collection that waited). */
int lb_collector_steps(lua_State *L, int on);
void lb_collector_step(lua_State *L);
int lb_check_devices(lua_State *L, int idx, struct ld_device **devs);

/* Optimizers (optim.c): the engine optimizer at idx, with its learning rate
   refreshed first when it is a Lua schedule function. */
#define LB_OPTIMIZER_MT "ldist.Optimizer"
struct ld_optimizer;
struct ld_optimizer *lb_check_optimizer(lua_State *L, int idx);
/* "WHAT: unknown option 'k'; did you mean ...? (it takes ...)", raised (nn.c):
   list, the index of a sequence of the names WHAT takes; _in: from one or
   two null-terminated arrays */
void lb_unknown_option(lua_State *L, const char *what, const char *k, int list);
void lb_unknown_option_in(lua_State *L, const char *what, const char *k, const char *const *a,
                          const char *const *b);
/* The option table at idx (anything else: nothing to check) takes only
   `names` (null-terminated): an unknown key raises lb_unknown_option_in's
   error, so a misspelt option is not silently ignored */
void lb_check_options(lua_State *L, int idx, const char *what, const char *const *names);

/* Datasets (data.c): push ds (a new reference, taken over) as a Dataset whose
   elements are lists; ds == NULL raises the engine's error. */
struct ld_dataset;
int lb_push_dataset(lua_State *L, struct ld_dataset *ds);

/* Module openers (each pushes its module table). */
int lb_open_tensor(lua_State *L);
int lb_open_autograd(lua_State *L);
int lb_open_json(lua_State *L);
int lb_open_nn(lua_State *L);
int lb_open_losses(lua_State *L);
int lb_open_distribute_c(lua_State *L);
int lb_open_optim(lua_State *L);
int lb_open_data(lua_State *L);
int lb_open_io(lua_State *L);
int lb_open_cluster(lua_State *L);
int lb_open_summary(lua_State *L);
int lb_open_image(lua_State *L);

#endif
