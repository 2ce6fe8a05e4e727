/*
 * repl.h - the parts of the `ldist` program: argument handling and scripts
 * (main.c), the interactive loop (repl.c), readline completion (complete.c).
 */
#ifndef LDIST_REPL_H
#define LDIST_REPL_H

#include <stdio.h>

#include <lua.h>

#define LDIST_PROGNAME "ldist"

/* Write "ldist: msg" to stderr (msg may be NULL). */
void repl_message(const char *msg);
/* Report the error message at the top of the stack (if status != LUA_OK),
   shortened for the terminal, and pop it. Returns status. */
int repl_report(lua_State *L, int status);
/* The one-line banner: "ldist 0.1.0 (Lua 5.4.6) devices: cpu:0". */
void repl_banner(FILE *out);

/* Run the interactive loop until Ctrl-D; returns the exit status. */
int repl_run(lua_State *L, int banner);

/* Install readline's completion for L (the state the REPL runs). */
void repl_complete_init(lua_State *L);

#endif
