/*
 * ldist.h - the one interpreter setup shared by every front end (the REPL,
 * the script runner, the Jupyter kernel, and `require "ldist"` from lua5.4).
 *
 *     lua_State *L = ldist_newstate();       // standard libs + ldist modules as globals
 *     ... run code under lua_pcall with ldist_traceback as the message handler ...
 *     lua_close(L);
 */
#ifndef LDIST_H
#define LDIST_H

#include <lua.h>

/* A new state with the standard libraries, the ldist modules loaded and their
   names (tensor, nn, optim, losses, metrics, data, datasets, autograd,
   distribute, callbacks, help, plot ...) set as globals. NULL on failure. */
lua_State *ldist_newstate(void);
/* The module table, as `require "ldist"` returns it (pushed on the stack). */
int luaopen_ldist(lua_State *L);
/* Add the small helpers (repr, isatty, termsize, walltime, ...) to the module
   table at the top of the stack (state.c). */
void ldist_set_helpers(lua_State *L);
/* Message handler for lua_pcall: adds a traceback to string errors. */
int ldist_traceback(lua_State *L);
/* Run `chunk` (already loaded at the top of the stack) with `nargs` args under
   ldist_traceback; returns the lua_pcall status, error message on the stack. */
int ldist_docall(lua_State *L, int nargs, int nres);
/* Ctrl-C: make the running Lua code raise "interrupted" at the next hook,
   and ask engine loops to stop (safe to call from a signal handler). */
void ldist_interrupt(lua_State *L);
/* Interactive input (a REPL line, a notebook cell): blank out, in place,
   the `local` keyword of every top-level `local a, b = ...` and
   `local function f`, so those names become globals and outlive the chunk,
   as IPython keeps a cell's variables. Blanks keep every line and column of
   error messages. Locals inside blocks, `local x` without a value and
   attributes (`local f <close> = ...`) keep their meaning. Returns how many
   were dropped. Both front ends call it, the same way. */
int ldist_keep_top_locals(char *src, size_t len);
/* Text rendering shared by the REPL and the kernel: the value at `idx` as a
   readable string (tables as nested literals, bounded depth and length,
   tensors like NumPy). Pushes the string. Never raises: an error inside
   __tostring becomes "<error in __tostring: ...>". */
void ldist_repr(lua_State *L, int idx);

/* The network plugin (netload.c): a symbol of build/ldist_net.so, opened on
   first use; NULL when it cannot be opened (ldist_net_error says why). */
void *ldist_net_symbol(const char *name);
const char *ldist_net_error(void);
/* Push a table that loads the cluster module from the plugin on first use. */
void ldist_push_lazy_cluster(lua_State *L);

#endif
