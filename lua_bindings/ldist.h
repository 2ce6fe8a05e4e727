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

#include <stddef.h>

#include <lua.h>

/* A new state with the standard libraries, the ldist modules loaded and their
   names (tensor, nn, optim, losses, metrics, data, datasets, autograd,
   distribute, callbacks, help, plot ...) set as globals. NULL on failure. */
lua_State *ldist_newstate(void);
/* The same state less the Lua prelude (lua_bindings/lua/prelude.lua) and the
   globals it defines, which ldist_finish_state adds. For the REPL's prompt:
   `ldist` shows it first and finishes the state before it reads the first
   key, so no input ever runs in an unfinished state. */
lua_State *ldist_newstate_deferred(void);
/* Finish a deferred state (a no-op on a finished one). LUA_OK, or the error
   status, the message reported on stderr (on a line of its own: the prompt
   is on the screen) as ldist_newstate reports its failure. */
int ldist_finish_state(lua_State *L);
/* Run the prelude's files, in order, with the module table at the top of the
   stack (luaopen_ldist, ldist_finish_state); raises their errors. */
void ldist_run_prelude(lua_State *L);
/* the registry key that marks a state whose prelude has not run yet */
#define LDIST_PRELUDE_DEFERRED "ldist.prelude_deferred"
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
/* The one compiler of interactive input, a REPL chunk or a notebook cell,
   as lua.c and IPython users expect:
     - `?x`, `x?`, `??x`, `help x` and a bare `help` run help(x) / help();
     - `=expr` is `return expr` (Lua 5.1-5.3);
     - top-level locals outlive the cell (ldist_keep_top_locals);
     - `return <cell>` first (one expression or a list), then the cell's last
       statement as an expression (`x = f(3); x` shows x), then statements;
     - a cell that is one misspelt global (`modle`) raises "global 'modle' is
       nil; did you mean 'model'?" instead of showing nil.
   Pushes the function and returns LUA_OK, or pushes the compiler's message
   and returns its status. *flags (may be NULL) gets LDIST_CELL_QUIET when
   the cell ends in ';' (run it, show nothing) and, on a syntax error,
   LDIST_CELL_INCOMPLETE when an attempt ended at <eof> (read more lines). */
#define LDIST_CELL_QUIET 1
#define LDIST_CELL_INCOMPLETE 2
int ldist_load_cell(lua_State *L, const char *code, size_t len, const char *chunkname, int *flags);
/* `?x`, `x?`, `??x`, `help x`, `help` -> "help(x)" into out (a help call the
   compiler runs); 0 when the code is not one of those. */
int ldist_help_shortcut(const char *code, size_t len, char *out, size_t outlen);
/* Does the input end in ';' (its value is not shown)? */
int ldist_cell_quiet(const char *code, size_t len);
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
