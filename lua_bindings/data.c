/*
 * data.c - the `data` module: tf.data-style datasets over the engine's
 * pipelines (engine/ld_data.h), and the IDX / CSV loaders.
 *
 *     local ds = data.Dataset.from_tensor_slices(x, y):shuffle(1000):batch(32):prefetch(2)
 *     for batch in ds do local xb, yb = batch[1], batch[2] ... end
 *
 * An element is a Lua table {t1, t2, ...} of tensors (even for one tensor),
 * or, for a dataset made from a table with string keys (TF's dict), a table
 * {name = tensor, ...} with those keys.
 *
 * Structure: the engine's elements are flat lists of tensors. A dataset's
 * user value is its structure ("spec"): nil for a list, or a table whose
 * array part holds the key names in sorted order (TF's flattening order of a
 * dict), component i of the engine's element being key spec[i]. Every
 * transformation shares its input's spec table. :map makes a new spec table
 * marked pending = true, filled the first time the function returns (the
 * function's output decides it, as TF's trace does) and checked on every
 * later call. Strategies' split input path (_next_split) stays a list.
 *
 * Where things run: every stage is a C stage of the engine's pipeline. A Lua
 * function given to :map runs on the interpreter's thread, inside the call
 * that asks for the next element (the engine's LD_MAP_CALLER_THREAD); a
 * :prefetch placed after such a map is moved by the engine just below the
 * lowest Lua map, so the C stages before it (slicing, shuffling, batching)
 * run ahead on a background thread while Lua code runs. Nothing on a
 * background thread ever touches the Lua state.
 *
 * Loops: `for b in ds do` works because a generic for calls ds(nil, prev)
 * each step (the __call metamethod). A call with prev == nil starts a new
 * iterator; each element handed out is remembered in a weak-keyed table
 * (element -> iterator), so the next call finds its loop's iterator from
 * prev. Loops over one dataset are independent (nested, or one after a
 * break), and the iterator of a loop left by break is freed when its last
 * element is collected. `for b in ds:iter() do` does the same with a
 * to-be-closed iterator, freed as soon as the loop ends, by break or error.
 */
#include "lbind.h"
#include "ld_data.h"
#include "ld_executor.h"
#include "ld_io.h"

#include <glob.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define LB_DATASET_MT "ldist.Dataset"
#define LB_ITER_MT "ldist.DatasetIterator"
static const char *const LOOPS = "ldist.data.loops";

/* The Lua thread that is driving an iterator right now, for Lua map
   functions and for releasing their references. Set around every engine
   call that may run or free a Lua map. */
static _Thread_local lua_State *cur_L;
#define WITH_L(L, stmt) do { lua_State *saved_L_ = cur_L; cur_L = (L); stmt; cur_L = saved_L_; } while (0)

typedef struct { ld_dataset *ds; } lb_ds;     /* user value 1: the spec; 2: the recipe */
typedef struct { ld_dataset_iter *it; int busy; } lb_it;   /* user value 1: the spec */

/* ================================================================ helpers */

static ld_dataset *check_ds(lua_State *L, int idx) {
    lb_ds *u = luaL_checkudata(L, idx, LB_DATASET_MT);
    if (!u->ds) luaL_argerror(L, idx, "dataset is not initialised");
    return u->ds;
}

/* A new, empty dataset userdata (liolib's pattern: the Lua object exists
   before the engine object, so an error in between leaks nothing). */
static lb_ds *new_ds(lua_State *L) {
    lb_ds *u = lua_newuserdatauv(L, sizeof *u, 2);
    u->ds = NULL;
    luaL_setmetatable(L, LB_DATASET_MT);
    return u;
}

/* A new, empty dataset userdata with the structure of the one at idx. */
static lb_ds *new_ds_like(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lb_ds *u = new_ds(L);
    lua_getiuservalue(L, idx, 1);
    lua_setiuservalue(L, -2, 1);
    return u;
}

/* ---- recipes: how each dataset was made ----
   A dataset remembers the call that made it: {op=, parent=, args={n=, ...}}
   (ds:_recipe()), so another process can make the same dataset from the same
   call (MultiWorkerMirrored's LocalCluster, parameter-server workers ship
   recipes, not data). args are the call's arguments after the dataset it
   transforms; they are recorded as given, before any conversion. */
static void record_recipe(lua_State *L, int ud, const char *op, int parent, int first, int last) {
    ud = lua_absindex(L, ud);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, op);
    lua_setfield(L, -2, "op");
    if (parent) { lua_pushvalue(L, parent); lua_setfield(L, -2, "parent"); }
    lua_createtable(L, last - first + 1, 1);
    for (int i = first; i <= last; i++) { lua_pushvalue(L, i); lua_rawseti(L, -2, i - first + 1); }
    lua_pushinteger(L, last >= first ? last - first + 1 : 0);
    lua_setfield(L, -2, "n");
    lua_setfield(L, -2, "args");
    lua_setiuservalue(L, ud, 2);
}

/* ---- nested structures (zip, enumerate) ----
   A spec {nest = {{spec = s1, n = c1}, ...}} describes an element made of
   parts side by side: part j has c_j of the flat tensors (n absent: counted
   from its spec when first needed) and structure s_j. As a Lua value a part
   is its single tensor when it is one tensor of a list, otherwise a table
   (its dict, or its list). */

/* tensors described by the spec at idx (nil: -1, unknown), or -1 */
static int spec_count(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx)) return -1;
    int n = -1;
    if (lua_getfield(L, idx, "nest") == LUA_TTABLE) {
        int parts = lua_gettop(L);
        n = 0;
        for (lua_Integer j = 1; j <= (lua_Integer)lua_rawlen(L, parts) && n >= 0; j++) {
            lua_rawgeti(L, parts, j);
            int c = lua_getfield(L, -1, "n") == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : -1;
            lua_pop(L, 1);
            if (c < 0) { lua_getfield(L, -1, "spec"); c = spec_count(L, -1); lua_pop(L, 1); }
            lua_pop(L, 1);
            n = c < 0 ? -1 : n + c;
        }
    } else if (lua_rawlen(L, idx) > 0) n = (int)lua_rawlen(L, idx);
    else {
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "n") == LUA_TNUMBER) n = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    return n;
}

static int is_nest(lua_State *L, int idx) {
    if (!lua_istable(L, idx)) return 0;
    int r = lua_getfield(L, idx, "nest") == LUA_TTABLE;
    lua_pop(L, 1);
    return r;
}
static int is_dict_spec(lua_State *L, int idx) { return lua_istable(L, idx) && lua_rawlen(L, idx) > 0; }

/* One component of an element for Lua (takes the reference): text
   (ld_tensor_text, a line of a file) is a Lua string, anything else a tensor. */
static void push_component(lua_State *L, ld_tensor *t) {
    if (ld_tensor_is_text(t)) {
        const char *p = ld_tensor_data(t);
        lua_pushlstring(L, p ? p : "", (size_t)t->shape[0]);
        ld_tensor_release(t);
        return;
    }
    lb_push_tensor(L, t, 0);
}

static void push_t(lua_State *L, ld_tensor **t, int own) {
    push_component(L, own ? *t : ld_tensor_retain(*t));
    if (own) *t = NULL;
}

/* Push the top-level values of an element with structure spec (at idx) made of
   the cnt tensors t (own: take the references); returns how many: a dict is
   one table, a nest one value per part, a list its tensors. */
static int push_values(lua_State *L, int idx, ld_tensor **t, int cnt, int own) {
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, LD_ELEMENT_MAX + 8, "element");
    if (is_dict_spec(L, idx) && (int)lua_rawlen(L, idx) == cnt) {
        lua_createtable(L, 0, cnt);
        for (int i = 0; i < cnt; i++) {
            lua_rawgeti(L, idx, i + 1);
            push_t(L, &t[i], own);
            lua_rawset(L, -3);
        }
        return 1;
    }
    if (is_nest(L, idx)) {
        lua_getfield(L, idx, "nest");
        int parts = lua_gettop(L), np = (int)lua_rawlen(L, parts), pos = 0;
        for (int j = 1; j <= np; j++) {
            lua_rawgeti(L, parts, j);
            int c = lua_getfield(L, -1, "n") == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : -1;
            lua_pop(L, 1);
            lua_getfield(L, -1, "spec");
            lua_remove(L, -2);
            int ps = lua_gettop(L);
            if (c < 0) c = spec_count(L, ps);
            if (c < 0 && j == np) c = cnt - pos;
            if (c < 0 || pos + c > cnt) luaL_error(L, "internal error: an element's structure does not match its %d tensors", cnt);
            if (is_dict_spec(L, ps)) push_values(L, ps, t + pos, c, own);
            else if (c == 1 && !is_nest(L, ps)) push_t(L, &t[pos], own);
            else {
                lua_createtable(L, c, 0);
                int tab = lua_gettop(L);
                int k = push_values(L, ps, t + pos, c, own);
                for (int i = k; i >= 1; i--) lua_rawseti(L, tab, i);
            }
            lua_remove(L, ps);
            pos += c;
        }
        lua_remove(L, parts);
        return np;
    }
    for (int i = 0; i < cnt; i++) push_t(L, &t[i], own);
    return cnt;
}

/* "nil", "a boolean", "a table", ...: a value's type in a sentence */
static const char *a_typename(lua_State *L, int idx) {
    int t = lua_type(L, idx);
    if (t == LUA_TNIL) return "nil";
    if (t == LUA_TTHREAD) return "a coroutine";
    return lua_pushfstring(L, "a %s", luaL_typename(L, idx));
}

/* Push an element built from e (takes ownership of its tensors): a list, or
   a table keyed by the spec (of the userdata at holder). */
static void push_element(lua_State *L, int holder, ld_element *e) {
    holder = lua_absindex(L, holder);
    lua_getiuservalue(L, holder, 1);
    int spec = lua_gettop(L);
    if (is_nest(L, spec)) {
        lua_createtable(L, e->n, 0);
        int tab = lua_gettop(L);
        int k = push_values(L, spec, e->t, e->n, 1);
        for (int i = k; i >= 1; i--) lua_rawseti(L, tab, i);
        e->n = 0;
        lua_remove(L, spec);
        return;
    }
    int keyed = lua_istable(L, spec) && (int)lua_rawlen(L, spec) == e->n && e->n > 0;
    lua_createtable(L, keyed ? 0 : e->n, keyed ? e->n : 0);
    for (int i = 0; i < e->n; i++) {
        ld_tensor *t = e->t[i];
        e->t[i] = NULL;
        if (keyed) lua_rawgeti(L, spec, i + 1);
        push_component(L, t);
        if (keyed) lua_rawset(L, -3);
        else lua_rawseti(L, -2, i + 1);
    }
    lua_remove(L, spec);
}

/* Sort the n strings in stack slots base..base+n-1 (insertion sort: n is at
   most LD_ELEMENT_MAX). */
static void sort_strings(lua_State *L, int base, int n) {
    for (int i = 1; i < n; i++)
        for (int j = base + i; j > base && strcmp(lua_tostring(L, j - 1), lua_tostring(L, j)) > 0; j--) {
            lua_pushvalue(L, j - 1);
            lua_pushvalue(L, j);
            lua_replace(L, j - 1);
            lua_replace(L, j);
        }
}

/* Push the string keys of the table at idx in sorted order and return their
   count; 0 when the table has no string key. Raises when it mixes string
   keys with others, or has more than LD_ELEMENT_MAX; `what` starts the
   message ("bad argument #1 to 'from_tensor_slices'"). */
static int push_sorted_keys(lua_State *L, int idx, const char *what) {
    idx = lua_absindex(L, idx);
    int base = lua_gettop(L) + 1, n = 0, other = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) { other = 1; continue; }
        if (n == LD_ELEMENT_MAX)
            return luaL_error(L, "%s (more than %d keys)", what, LD_ELEMENT_MAX);
        lua_pushvalue(L, -1);
        lua_insert(L, base + n);      /* below the iteration key */
        n++;
    }
    if (n && other) {
        lua_settop(L, base - 1);
        return luaL_error(L, "%s (a table with string keys, a dict, cannot have other keys too)", what);
    }
    sort_strings(L, base, n);
    return n;
}

/* Fill the userdata at the top with ds, or raise the engine's error. */
static int set_ds(lua_State *L, lb_ds *u, ld_dataset *ds, int arg) {
    if (!ds) return lb_engine_error(L, arg);
    u->ds = ds;
    return 1;
}

/* (lbind.h) a new Dataset userdata (elements as lists) holding ds, or ds == NULL's engine error */
int lb_push_dataset(lua_State *L, ld_dataset *ds) { return set_ds(L, new_ds(L), ds, 0); }

static int ds_gc(lua_State *L) {
    lb_ds *u = luaL_checkudata(L, 1, LB_DATASET_MT);
    WITH_L(L, ld_dataset_release(u->ds));
    u->ds = NULL;
    return 0;
}

static int64_t opt_count(lua_State *L, int idx, int64_t def) {
    if (lua_isnoneornil(L, idx)) return def;
    return (int64_t)luaL_checkinteger(L, idx);
}


/* An option from the table at idx (or nil when idx is not a table). */
static int get_opt(lua_State *L, int idx, const char *name) {
    if (!lua_istable(L, idx)) { lua_pushnil(L); return LUA_TNIL; }
    return lua_getfield(L, idx, name);
}

/* ================================================================ sources */

/* Dataset.from_tensor_slices({"a", "b", ...}): one text element per string
   (TF slices a string tensor so; a list of file names is the usual one) */
static int ds_from_strings(lua_State *L) {
    lua_Integer n = luaL_len(L, 1);
    if (n > INT32_MAX) return luaL_argerror(L, 1, "too many strings");
    const char **s = lua_newuserdatauv(L, sizeof *s * (size_t)(n ? n : 1), 0);
    size_t *len = lua_newuserdatauv(L, sizeof *len * (size_t)(n ? n : 1), 0);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_geti(L, 1, i) != LUA_TSTRING)
            return luaL_error(L, "bad argument #1 to 'from_tensor_slices' (a list of strings: entry %I is a %s)", i,
                              luaL_typename(L, -1));
        s[i - 1] = lua_tolstring(L, -1, &len[i - 1]);
        lua_pop(L, 1);                                   /* the list keeps the string alive */
    }
    lb_ds *u = new_ds(L);
    record_recipe(L, -1, "from_tensor_slices", 0, 1, 1);
    return set_ds(L, u, ld_dataset_from_strings((int)n, s, len), 1);
}

/* data.TextLineDataset(path or {paths}) */
static int ds_text_lines(lua_State *L) {
    int nargs = lua_gettop(L);
    if (lua_type(L, 1) == LUA_TSTRING) {
        lua_createtable(L, 1, 0);
        lua_pushvalue(L, 1);
        lua_rawseti(L, -2, 1);
    } else if (lua_istable(L, 1) && !lb_test_tensor(L, 1)) lua_pushvalue(L, 1);
    else return luaL_argerror(L, 1, lua_pushfstring(L, "a file name or a list of them expected, got %s", luaL_typename(L, 1)));
    int list = lua_gettop(L);
    lua_Integer n = luaL_len(L, list);
    if (n < 1) return luaL_argerror(L, 1, "no file names given");
    if (n > INT32_MAX) return luaL_argerror(L, 1, "too many files");
    const char **paths = lua_newuserdatauv(L, sizeof *paths * (size_t)n, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_geti(L, list, i) != LUA_TSTRING)
            return luaL_error(L, "bad argument #1 to 'TextLineDataset' (file name %I is a %s)", i, luaL_typename(L, -1));
        paths[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    lb_ds *u = new_ds(L);
    record_recipe(L, -1, "TextLineDataset", 0, 1, nargs);
    return set_ds(L, u, ld_dataset_text_lines((int)n, paths), 1);
}

static int ds_zip(lua_State *L);
static int ds_from_tensor_slices(lua_State *L);

/* whether the value at idx is a table (not a tensor) holding tensors: a list
   {x, y} or a dict {name = x} of them, as a part of a nested element */
static int holds_tensors(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx) || lb_test_tensor(L, idx)) return 0;
    lua_geti(L, idx, 1);
    int r = lb_test_tensor(L, -1) != NULL;
    lua_pop(L, 1);
    if (r) return 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        r = lua_type(L, -2) == LUA_TSTRING && lb_test_tensor(L, -1) != NULL;
        lua_pop(L, 1);
        if (r) { lua_pop(L, 1); return 1; }
    }
    return 0;
}

/* from_tensor_slices of a nested structure, TF's from_tensor_slices(((xa, xb), y)):
   the parts (the n values from slot first) each sliced on their own and zipped,
   so an element is {{xa, xb}, y} (a part that is a dict stays a dict). */
/* push data.Dataset[name] as the prelude left it (data/datasets.lua gives zip a
   recipe that travels to other processes), else the C function */
static void push_dataset_fn(lua_State *L, const char *name, lua_CFunction fallback) {
    int top = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.module");
    if (lua_istable(L, -1) && lua_getfield(L, -1, "data") == LUA_TTABLE && lua_getfield(L, -1, "Dataset") == LUA_TTABLE
        && lua_getfield(L, -1, name) == LUA_TFUNCTION) {
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return;
    }
    lua_settop(L, top);
    lua_pushcfunction(L, fallback);
}

static int ds_from_nested_slices(lua_State *L, int first, int n) {
    if (n > LD_ELEMENT_MAX) return luaL_argerror(L, 1, "too many parts (at most 16)");
    push_dataset_fn(L, "zip", ds_zip);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        push_dataset_fn(L, "from_tensor_slices", ds_from_tensor_slices);
        lua_pushvalue(L, first + i);
        lua_call(L, 1, 1);
        lua_rawseti(L, -2, i + 1);
    }
    lua_call(L, 1, 1);
    return 1;
}

/* Dataset.from_tensor_slices(x, y, ...), ({x, y, ...}) or ({name = x, ...}),
   or nested: ({{xa, xb}, {ya, yb}}), ({xa, xb}, y), ({{a = xa, b = xb}, y}) */
static int ds_from_tensor_slices(lua_State *L) {
    static const char *const WHAT = "bad argument #1 to 'from_tensor_slices'";
    int first = 1, n = lua_gettop(L), keys = 0;   /* keys: stack slot of the first sorted key (a dict) */
    int nargs = n;
    for (int i = 1; i <= n && n > 1; i++)
        if (holds_tensors(L, i)) return ds_from_nested_slices(L, 1, n);
    if (n == 1 && lua_istable(L, 1) && !lb_test_tensor(L, 1)) {
        int nested = 0;
        lua_geti(L, 1, 1);
        int list = lb_test_tensor(L, -1) != NULL || holds_tensors(L, -1);
        lua_pop(L, 1);
        for (lua_Integer i = 1; list && !nested && i <= (lua_Integer)lua_rawlen(L, 1); i++) {
            lua_geti(L, 1, i);
            nested = holds_tensors(L, -1);
            lua_pop(L, 1);
        }
        if (nested) {
            lua_Integer len = luaL_len(L, 1);
            if (len > LD_ELEMENT_MAX) return luaL_argerror(L, 1, "too many parts (at most 16)");
            for (lua_Integer i = 1; i <= len; i++) lua_geti(L, 1, i);
            return ds_from_nested_slices(L, 2, (int)len);
        }
    }
    if (n == 1 && lua_istable(L, 1) && !lb_test_tensor(L, 1)) {
        int ty = lua_geti(L, 1, 1);
        lua_pop(L, 1);
        if (ty == LUA_TSTRING) return ds_from_strings(L);
    }
    /* the recipe keeps the arguments as given (slots 1..n are converted in place below) */
    lua_createtable(L, n, 0);
    for (int i = 1; i <= n; i++) { lua_pushvalue(L, i); lua_rawseti(L, -2, i); }
    lua_rawsetp(L, LUA_REGISTRYINDEX, (void *)&record_recipe);
    /* {x, y, ...}: a list of tensors when its first entry is a tensor (a table
       of numbers such as {{1, 2}, {3, 4}} is data for one tensor instead);
       {name = x, ...}: a dict, sliced in the sorted order of its keys */
    if (n == 1 && lua_istable(L, 1) && !lb_test_tensor(L, 1)) {
        int t1 = lua_geti(L, 1, 1);
        int is_list = lb_test_tensor(L, -1) != NULL;
        lua_pop(L, 1);
        int nk = push_sorted_keys(L, 1, WHAT);   /* raises on a list with string keys too */
        if (is_list) {
            lua_Integer len = luaL_len(L, 1);
            if (len > LD_ELEMENT_MAX) return luaL_argerror(L, 1, "too many tensors (at most 16)");
            for (lua_Integer i = 1; i <= len; i++) lua_geti(L, 1, i);
            first = 2;
            n = (int)len;
        } else if (nk > 0) {
            keys = 2;
            for (int i = 0; i < nk; i++) lua_getfield(L, 1, lua_tostring(L, keys + i));
            first = keys + nk;
            n = nk;
        } else if (t1 == LUA_TNIL) {
            lua_pushnil(L);
            if (!lua_next(L, 1))
                return luaL_argerror(L, 1, "the table is empty; give tensors, a list {x, y} or a dict {name = x, ...}");
            lua_settop(L, 1);
        }
    }
    if (n < 1) return luaL_argerror(L, 1, "no tensors given");
    if (n > LD_ELEMENT_MAX) return luaL_argerror(L, LD_ELEMENT_MAX + 1, "too many tensors (at most 16)");
    /* Convert numbers and tables of numbers; anchor every tensor in a userdata. */
    ld_tensor *ts[LD_ELEMENT_MAX];
    for (int i = 0; i < n; i++) {
        int idx = first + i;
        ld_tensor *t = lb_test_tensor(L, idx);
        if (!t) {
            if (!lua_istable(L, idx)) {
                if (keys)
                    return luaL_error(L, "%s ('%s' is a %s; tensor or table of numbers expected)", WHAT,
                                      lua_tostring(L, keys + i), luaL_typename(L, idx));
                return luaL_argerror(L, first == 1 ? idx : 1,
                                     lua_pushfstring(L, "tensor expected, got %s", luaL_typename(L, idx)));
            }
            lb_push_tensor(L, lb_to_tensor(L, idx, LD_F32), idx);
            lua_replace(L, idx);
            t = lb_test_tensor(L, idx);
        }
        ts[i] = t;
    }
    /* A dict's errors name its keys (the engine would number the tensors). */
    if (keys) {
        for (int i = 0; i < n; i++) {
            if (ts[i]->ndim == 0)
                return luaL_error(L, "%s ('%s' is a scalar; every value needs a first dimension to slice)", WHAT,
                                  lua_tostring(L, keys + i));
            if (ts[i]->shape[0] != ts[0]->shape[0])
                return luaL_error(L, "%s (the first dimensions differ: '%s' has %I rows, '%s' has %I)", WHAT,
                                  lua_tostring(L, keys), (lua_Integer)ts[0]->shape[0],
                                  lua_tostring(L, keys + i), (lua_Integer)ts[i]->shape[0]);
        }
    }
    lb_ds *u = new_ds(L);
    if (keys) {
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) {
            lua_pushvalue(L, keys + i);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setiuservalue(L, -2, 1);
    }
    int top = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, (void *)&record_recipe);
    for (int i = 1; i <= nargs; i++) lua_rawgeti(L, top + 1, i);
    record_recipe(L, top, "from_tensor_slices", 0, top + 2, top + 1 + nargs);
    lua_settop(L, top);
    return set_ds(L, u, ld_dataset_from_tensor_slices(n, ts), 0);
}

/* Dataset.range(stop) / range(start, stop[, step]) */
static int ds_range(lua_State *L) {
    lua_Integer a = luaL_checkinteger(L, 1);
    lua_Integer start = 0, stop = a, step = 1;
    if (!lua_isnoneornil(L, 2)) { start = a; stop = luaL_checkinteger(L, 2); step = luaL_optinteger(L, 3, 1); }
    if (step == 0) return luaL_argerror(L, 3, "step must not be zero");
    int nargs = lua_gettop(L);
    lb_ds *u = new_ds(L);
    record_recipe(L, -1, "range", 0, 1, nargs);
    return set_ds(L, u, ld_dataset_range(start, stop, step), 0);
}

/* ================================================================ transformations */

static int ds_batch(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = (int64_t)luaL_checkinteger(L, 2);
    if (n < 1) return luaL_argerror(L, 2, "batch size must be positive");
    int drop = 0;
    if (lua_isboolean(L, 3)) drop = lua_toboolean(L, 3);
    else if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        static const char *const batch_opts[] = {"drop_remainder", "num_parallel_calls", "deterministic", "name", NULL};
        lb_check_options(L, 3, "Dataset:batch", batch_opts);
        get_opt(L, 3, "drop_remainder");
        drop = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "batch", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_batch(in, n, drop), 2);
}

static int ds_shuffle(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int64_t buf = (int64_t)luaL_checkinteger(L, 2);
    if (buf < 1) return luaL_argerror(L, 2, "buffer size must be positive");
    uint64_t seed;
    int have_seed = 0, reshuffle = 1;
    if (lua_isinteger(L, 3)) { seed = (uint64_t)lua_tointeger(L, 3); have_seed = 1; }
    else if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        static const char *const sh_opts[] = {"seed", "reshuffle_each_iteration", "name", NULL};
        lb_check_options(L, 3, "Dataset:shuffle", sh_opts);
        if (get_opt(L, 3, "seed") != LUA_TNIL) {
            int ok;
            seed = (uint64_t)lua_tointegerx(L, -1, &ok);
            if (!ok) return luaL_argerror(L, 3, "seed must be an integer");
            have_seed = 1;
        }
        lua_pop(L, 1);
        if (get_opt(L, 3, "reshuffle_each_iteration") != LUA_TNIL) reshuffle = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    /* Without a seed, draw one from ldist's generator: ldist.seed(n) makes it reproducible. */
    if (!have_seed) seed = ld_rng_next(ld_global_rng());
    lb_ds *u = new_ds_like(L, 1);
    /* the recipe carries the seed used, so a rebuilt dataset shuffles alike */
    lua_pushvalue(L, 2);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)seed);
    lua_setfield(L, -2, "seed");
    lua_pushboolean(L, reshuffle);
    lua_setfield(L, -2, "reshuffle_each_iteration");
    record_recipe(L, -3, "shuffle", 1, lua_gettop(L) - 1, lua_gettop(L));
    lua_pop(L, 2);
    return set_ds(L, u, ld_dataset_shuffle(in, buf, seed, reshuffle), 2);
}

static int ds_repeat(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = opt_count(L, 2, -1);
    if (n < -1) return luaL_argerror(L, 2, "count must be -1 (forever) or at least 0");
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "repeat", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_repeat(in, n), 2);
}

static int ds_take(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = (int64_t)luaL_checkinteger(L, 2);
    if (n < -1) return luaL_argerror(L, 2, "count must be -1 (all) or at least 0");
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "take", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_take(in, n), 2);
}

static int ds_skip(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = (int64_t)luaL_checkinteger(L, 2);
    if (n < -1) return luaL_argerror(L, 2, "count must be -1 (all) or at least 0");
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "skip", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_skip(in, n), 2);
}

static int ds_prefetch(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = opt_count(L, 2, LD_AUTOTUNE);
    if (n < -1 || n > 1 << 20) return luaL_argerror(L, 2, "buffer size must be data.AUTOTUNE (-1) or from 0 to 2^20");
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "prefetch", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_prefetch(in, (int)n), 2);
}

/* ---- map with a Lua function ---- */

/* The function and the specs of its input and output (registry refs). */
typedef struct { int ref, in_spec, out_spec; } lua_fn;

static void lua_fn_free(void *p) {
    lua_fn *f = p;
    /* Runs where the last node using it is released: a Lua call (gc, next)
       that set cur_L. Without a Lua thread here, the references stay. */
    if (cur_L) {
        luaL_unref(cur_L, LUA_REGISTRYINDEX, f->ref);
        luaL_unref(cur_L, LUA_REGISTRYINDEX, f->in_spec);
        luaL_unref(cur_L, LUA_REGISTRYINDEX, f->out_spec);
    }
    free(f);
}

typedef struct { const lua_fn *fn; const ld_element *in; ld_element *out; } map_call;

/* Check the keys of a result (the sorted strings at base..base+n-1; n = 0
   for a list) against the output spec at spec, filling it on the first call. */
static void check_out_spec(lua_State *L, int spec, int base, int n, const char *what) {
    lua_getfield(L, spec, "pending");
    int pending = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (pending) {
        for (int i = 0; i < n; i++) {
            lua_pushvalue(L, base + i);
            lua_rawseti(L, spec, i + 1);
        }
        lua_pushnil(L);
        lua_setfield(L, spec, "pending");
        return;
    }
    int same = (int)lua_rawlen(L, spec) == n;
    for (int i = 0; same && i < n; i++) {
        lua_rawgeti(L, spec, i + 1);
        same = lua_rawequal(L, -1, base + i);
        lua_pop(L, 1);
    }
    if (same) return;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, what);
    luaL_addstring(&b, " returned ");
    for (int pass = 0; pass < 2; pass++) {
        int m = pass ? (int)lua_rawlen(L, spec) : n;
        if (m == 0) luaL_addstring(&b, "a list of tensors");
        else {
            luaL_addstring(&b, "a table with keys {");
            for (int i = 0; i < m; i++) {
                if (i) luaL_addstring(&b, ", ");
                if (pass) lua_rawgeti(L, spec, i + 1);
                else lua_pushvalue(L, base + i);
                luaL_addvalue(&b);
            }
            luaL_addstring(&b, "}");
        }
        luaL_addstring(&b, pass ? " for an earlier element; every element must have the same structure"
                                : " here, but ");
    }
    luaL_pushresult(&b);
    lua_error(L);
}

/* Turn the nres values at first.. (several values, or one table of them: a
   list or a dict) into out's tensors, checking (or, while pending, filling)
   the structure spec at out_spec; numbers become scalars (integers int64,
   others float32). `what` names the producer in errors. */
static int results_to_element(lua_State *L, int first, int nres, int out_spec, ld_element *out, const char *what) {
    int keys = 0;
    if (nres == 1 && lua_istable(L, first) && !lb_test_tensor(L, first)) {   /* a table of tensors */
        int nk = push_sorted_keys(L, first, lua_pushfstring(L, "%s's result is not an element", what));
        if (nk > 0) {
            keys = lua_gettop(L) - nk + 1;
            for (int i = 0; i < nk; i++) lua_getfield(L, first, lua_tostring(L, keys + i));
            first = keys + nk;
            nres = nk;
        } else {
            lua_Integer len = luaL_len(L, first);
            if (len > LD_ELEMENT_MAX) return luaL_error(L, "%s returned %d tensors, at most %d", what, (int)len, LD_ELEMENT_MAX);
            for (lua_Integer i = 1; i <= len; i++) lua_geti(L, first, i);
            first = lua_gettop(L) - (int)len + 1;
            nres = (int)len;
        }
    }
    if (nres == 0) return luaL_error(L, "%s returned nothing; it must return the new element's tensors", what);
    if (nres > LD_ELEMENT_MAX) return luaL_error(L, "%s returned %d values, at most %d", what, nres, LD_ELEMENT_MAX);
    check_out_spec(L, out_spec, keys, keys ? nres : 0, what);
    lua_pushinteger(L, nres);
    lua_setfield(L, out_spec, "n");
    for (int i = 0; i < nres; i++) {
        int idx = first + i;
        ld_tensor *t = lb_test_tensor(L, idx);
        if (t) t = ld_tensor_retain(t);
        else if (lua_isinteger(L, idx)) {
            int64_t v = lua_tointeger(L, idx);
            t = ld_tensor_from_data(LD_I64, 0, NULL, &v, NULL);
        } else if (lua_type(L, idx) == LUA_TNUMBER) t = ld_tensor_scalar((float)lua_tonumber(L, idx), NULL);
        else if (lua_type(L, idx) == LUA_TSTRING) {       /* text: a string element (TF's tf.string scalar) */
            size_t len;
            const char *str = lua_tolstring(L, idx, &len);
            t = ld_tensor_text(str, len);
        }
        else if (keys) return luaL_error(L, "%s's result '%s' is %s; tensors, numbers or strings expected", what,
                                         lua_tostring(L, keys + i), a_typename(L, idx));
        else return luaL_error(L, "%s's result %d is %s; tensors, numbers or strings expected", what, i + 1, a_typename(L, idx));
        if (!t) return lb_engine_error(L, 0);
        out->t[out->n++] = t;
    }
    return 0;
}

/* Runs under lua_pcall: every Lua error here is caught by lua_map_fn. */
static int map_trampoline(lua_State *L) {
    map_call *c = lua_touserdata(L, 1);
    luaL_checkstack(L, 2 * LD_ELEMENT_MAX + 8, "map arguments");
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->in_spec);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->out_spec);
    int in_spec = 2, out_spec = 3, base = lua_gettop(L);
    /* a dict element is one table argument (TF passes the dict); a list, its tensors */
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->ref);
    int nargs = push_values(L, in_spec, (ld_tensor **)c->in->t, c->in->n, 0);
    lua_call(L, nargs, LUA_MULTRET);
    return results_to_element(L, base + 1, lua_gettop(L) - base, out_spec, c->out, "the map function");
}

/* Run f(ctx) in Lua under lua_pcall, on the interpreter's thread (where
   dataset functions run): a map function, a filter predicate, a generator.
   what names it in the messages. LD_OK, or the Lua error as the engine's. */
static int lua_protected(lua_CFunction f, void *ctx, const char *what) {
    lua_State *L = cur_L;
    if (!L)
        return ld_fail(LD_EARG, "a Lua %s can only run on the interpreter's thread "
                                "(this iterator was advanced from another thread)", what);
    if (!lua_checkstack(L, 4)) return ld_fail(LD_ENOMEM, "%s: Lua stack overflow", what);
    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, ctx);
    if (lb_pcall_kept(L, 1, 0) != LUA_OK) {       /* its frames go with the error (lb_kept_follow) */
        const char *m = lua_tostring(L, -1);
        ld_fail(LD_EARG, "%s: %s", what, m ? m : "(error object is not a string)");
        lua_pop(L, 1);
        return LD_EARG;
    }
    return LD_OK;
}

static int lua_map_fn(void *ud, const ld_element *in, ld_element *out) {
    map_call c = {ud, in, out};
    return lua_protected(map_trampoline, &c, "map function");
}

static int ds_map(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int nargs = lua_gettop(L);
    lb_ds *u = new_ds(L);
    record_recipe(L, -1, "map", 1, 2, nargs);
    lua_createtable(L, 0, 1);           /* the output's spec, known at the first call */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "pending");
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, -3, 1);
    lua_fn *f = malloc(sizeof *f);
    if (!f) return luaL_error(L, "not enough memory");
    f->out_spec = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_getiuservalue(L, 1, 1);
    f->in_spec = luaL_ref(L, LUA_REGISTRYINDEX);   /* LUA_REFNIL for a list */
    lua_pushvalue(L, 2);
    f->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    ld_dataset *d;
    WITH_L(L, d = ld_dataset_map(in, lua_map_fn, f, lua_fn_free, LD_MAP_CALLER_THREAD));
    return set_ds(L, u, d, 2);
}

/* ---- filter with a Lua predicate ---- */

typedef struct { const lua_fn *fn; const ld_element *in; int *keep; } filter_call;

/* Runs under lua_pcall, like map_trampoline. */
static int filter_trampoline(lua_State *L) {
    filter_call *c = lua_touserdata(L, 1);
    luaL_checkstack(L, 2 * LD_ELEMENT_MAX + 8, "filter arguments");
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->in_spec);
    int base = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->ref);
    int nargs = push_values(L, base, (ld_tensor **)c->in->t, c->in->n, 0);
    lua_call(L, nargs, 1);
    int r = base + 1;
    if (lua_isboolean(L, r)) { *c->keep = lua_toboolean(L, r); return 0; }
    if (lua_type(L, r) == LUA_TNUMBER) { *c->keep = lua_tonumber(L, r) != 0; return 0; }
    ld_tensor *t = lb_test_tensor(L, r);
    if (t && t->ndim == 0) {
        double v;
        if (ld_tensor_item(t, &v) != LD_OK) return lb_engine_error(L, 0);
        *c->keep = v != 0;
        return 0;
    }
    if (t) {
        char sh[96];
        return luaL_error(L, "the filter predicate returned a tensor of shape %s; it must return a boolean or a "
                             "0-d (scalar) tensor", ld_shape_str(t, sh, sizeof sh));
    }
    return luaL_error(L, "the filter predicate returned %s; it must return a boolean or a 0-d (scalar) tensor",
                      lua_isnil(L, r) ? "nothing (nil)" : luaL_typename(L, r));
}

static int lua_filter_fn(void *ud, const ld_element *in, int *keep) {
    filter_call c = {ud, in, keep};
    return lua_protected(filter_trampoline, &c, "filter predicate");
}

static int ds_filter(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    if (lua_type(L, 2) != LUA_TFUNCTION)
        return luaL_argerror(L, 2, lua_pushfstring(L, "the predicate must be a function, got %s", luaL_typename(L, 2)));
    int nargs = lua_gettop(L);
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "filter", 1, 2, nargs);
    lua_fn *f = malloc(sizeof *f);
    if (!f) return luaL_error(L, "not enough memory");
    f->out_spec = LUA_NOREF;
    lua_getiuservalue(L, 1, 1);
    f->in_spec = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, 2);
    f->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    ld_dataset *d;
    WITH_L(L, d = ld_dataset_filter(in, lua_filter_fn, f, lua_fn_free, LD_MAP_CALLER_THREAD));
    return set_ds(L, u, d, 2);
}

/* ---- zip, shard, enumerate, unbatch, cache ---- */

/* push a nest part record {spec=, n=} for the dataset at idx */
static void push_part(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_createtable(L, 0, 2);
    lua_getiuservalue(L, idx, 1);
    int has_spec = !lua_isnil(L, -1);
    lua_setfield(L, -2, "spec");
    if (!has_spec) {
        lua_pushinteger(L, ld_dataset_components(check_ds(L, idx)));
        lua_setfield(L, -2, "n");
    }
}

/* Dataset.zip({ds1, ds2, ...}) or zip(ds1, ds2, ...) */
static int ds_zip(lua_State *L) {
    int nargs = lua_gettop(L), list = 0, n;
    if (nargs == 1 && lua_istable(L, 1) && !luaL_testudata(L, 1, LB_DATASET_MT)) {
        list = 1;
        n = (int)luaL_len(L, 1);
        lua_pushnil(L);
        while (lua_next(L, 1)) {
            lua_pop(L, 1);
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n)
                return luaL_argerror(L, 1, "a list of datasets {ds1, ds2, ...} expected (zip of a dict is not supported)");
        }
    } else n = nargs;
    if (n < 1) return luaL_argerror(L, 1, "no datasets given; zip({ds1, ds2, ...})");
    if (n > LD_ELEMENT_MAX) return luaL_argerror(L, 1, "too many datasets (at most 16)");
    int base = lua_gettop(L);
    ld_dataset *ins[LD_ELEMENT_MAX];
    for (int i = 0; i < n; i++) {
        if (list) lua_rawgeti(L, 1, i + 1);
        else lua_pushvalue(L, i + 1);
        if (!luaL_testudata(L, -1, LB_DATASET_MT))
            return luaL_error(L, "bad argument to 'zip' (dataset %d is a %s; datasets expected)", i + 1, luaL_typename(L, -1));
        ins[i] = check_ds(L, -1);
    }
    lb_ds *u = new_ds(L);
    int ud = lua_gettop(L);
    lua_createtable(L, 0, 1);                  /* spec: one part per dataset */
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) { push_part(L, base + 1 + i); lua_rawseti(L, -2, i + 1); }
    lua_setfield(L, -2, "nest");
    lua_setiuservalue(L, ud, 1);
    record_recipe(L, ud, "zip", 0, 1, nargs);  /* data/datasets.lua gives it a recipe that travels */
    return set_ds(L, u, ld_dataset_zip(n, ins), 1);
}

static int ds_shard(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    lua_Integer n = luaL_checkinteger(L, 2), i = luaL_checkinteger(L, 3);
    if (n < 1) return luaL_argerror(L, 2, lua_pushfstring(L, "num_shards must be greater than zero (got %I)", n));
    if (i < 0 || i >= n)
        return luaL_argerror(L, 3, lua_pushfstring(L, "index must be between 0 and %I (got %I)", n - 1, i));
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "shard", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_shard(in, n, i), 2);
}

static int ds_enumerate(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    lua_Integer start = 0;
    if (lua_istable(L, 2)) {
        static const char *const en_opts[] = {"start", "name", NULL};
        lb_check_options(L, 2, "Dataset:enumerate", en_opts);
        if (get_opt(L, 2, "start") != LUA_TNIL) {
            int ok;
            start = lua_tointegerx(L, -1, &ok);
            if (!ok) return luaL_argerror(L, 2, "start must be an integer");
        }
        lua_pop(L, 1);
    } else if (!lua_isnoneornil(L, 2)) {
        if (!lua_isinteger(L, 2)) return luaL_argerror(L, 2, lua_pushfstring(L, "start must be an integer, got %s", luaL_typename(L, 2)));
        start = lua_tointeger(L, 2);
    }
    lb_ds *u = new_ds(L);
    int ud = lua_gettop(L);
    lua_createtable(L, 0, 1);                  /* spec: {index, element} */
    lua_createtable(L, 2, 0);
    lua_createtable(L, 0, 1);
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "n");
    lua_rawseti(L, -2, 1);
    push_part(L, 1);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "nest");
    lua_setiuservalue(L, ud, 1);
    record_recipe(L, ud, "enumerate", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_enumerate(in, start), 2);
}

static int ds_unbatch(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "unbatch", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_unbatch(in), 2);
}

/* ds:cache() in memory, ds:cache(filename) in a file (TF: "" is memory) */
static int ds_cache(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    const char *path = luaL_optstring(L, 2, "");
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "cache", 1, 2, nargs);
    return set_ds(L, u, *path ? ld_dataset_cache_file(in, path) : ld_dataset_cache(in), 2);
}


/* ---- padded_batch ---- */

/* a shape {d1, d2, ...} (-1 or false: the longest in the batch) at idx into pad component c */
static void check_pad_shape(lua_State *L, int idx, ld_padding *p, int c, const char *name) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx) || lb_test_tensor(L, idx))
        luaL_error(L, "bad argument #3 to 'padded_batch' (padded_shapes%s: a shape {d1, d2, ...} expected, got %s)", name, luaL_typename(L, idx));
    lua_Integer nd = luaL_len(L, idx);
    if (nd > LD_MAX_DIMS) luaL_error(L, "bad argument #3 to 'padded_batch' (padded_shapes%s has more than %d dimensions)", name, LD_MAX_DIMS);
    p->ndim[c] = (int)nd;
    for (lua_Integer i = 1; i <= nd; i++) {
        int ty = lua_geti(L, idx, i), ok = 1;
        lua_Integer v = -1;
        if (ty == LUA_TNUMBER) v = lua_tointegerx(L, -1, &ok);
        else if (!(ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))) ok = 0;
        if (!ok || v < -1)
            luaL_error(L, "bad argument #3 to 'padded_batch' (padded_shapes%s: dimension %d must be a size >= 0, or -1 for the longest in the batch)", name, (int)i);
        p->shape[c][i - 1] = v;
        lua_pop(L, 1);
    }
}

static double check_pad_value(lua_State *L, int idx, const char *name) {
    ld_tensor *t = lb_test_tensor(L, idx);
    double v;
    if (t && t->ndim == 0) {
        if (ld_tensor_item(t, &v) != LD_OK) lb_engine_error(L, 0);
        return v;
    }
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "bad argument #3 to 'padded_batch' (padding_values%s: a number or a 0-d tensor expected, got %s)", name, luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

/* padded_shapes / padding_values (the option at the top) into p: one value
   for a one-component element, a list per component, or a dict keyed like
   the elements (spec at specidx). shapes: whether it is padded_shapes. */
static void read_pad_opt(lua_State *L, int specidx, ld_padding *p, int shapes) {
    int opt = lua_gettop(L);
    const char *what = shapes ? "padded_shapes" : "padding_values";
    if (lua_isnil(L, opt)) return;
    int single;
    if (shapes) {                       /* a shape is a table of numbers (or empty) */
        single = 0;
        if (lua_istable(L, opt)) {
            int t1 = lua_geti(L, opt, 1);
            single = t1 == LUA_TNUMBER || t1 == LUA_TBOOLEAN;
            lua_pop(L, 1);
            if (!single) {
                lua_pushnil(L);
                single = !lua_next(L, opt);     /* {}: a scalar's shape */
                if (!single) lua_pop(L, 2);
            }
        }
    } else single = !lua_istable(L, opt) || lb_test_tensor(L, opt);
    if (single) {
        if (shapes) { p->n = 1; check_pad_shape(L, opt, p, 0, ""); }
        else {
            double v = check_pad_value(L, opt, "");
            for (int c = 0; c < LD_ELEMENT_MAX; c++) p->value[c] = v;
        }
        return;
    }
    if (!lua_istable(L, opt)) luaL_error(L, "bad argument #3 to 'padded_batch' (%s must be a table)", what);
    lua_geti(L, opt, 1);
    int is_list = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (is_list) {
        lua_Integer n = luaL_len(L, opt);
        if (n > LD_ELEMENT_MAX) luaL_error(L, "bad argument #3 to 'padded_batch' (%s for %d components, at most %d)", what, (int)n, LD_ELEMENT_MAX);
        if (shapes) p->n = (int)n;
        for (lua_Integer c = 1; c <= n; c++) {
            lua_geti(L, opt, c);
            const char *name = lua_pushfstring(L, "[%d]", (int)c);
            lua_insert(L, -2);
            if (shapes) check_pad_shape(L, -1, p, (int)c - 1, name);
            else p->value[c - 1] = check_pad_value(L, lua_gettop(L), name);
            lua_pop(L, 2);
        }
        return;
    }
    /* a dict: by the element's keys */
    int nk = is_dict_spec(L, specidx) ? (int)lua_rawlen(L, specidx) : 0;
    if (!nk) luaL_error(L, "bad argument #3 to 'padded_batch' (%s is a dict, but the elements' keys are not known yet "
                        "(they are after a map); give a list in the order of the sorted keys)", what);
    lua_pushnil(L);
    while (lua_next(L, opt)) {
        lua_pop(L, 1);
        int found = 0;
        for (int i = 1; i <= nk && !found; i++) {
            lua_rawgeti(L, specidx, i);
            found = lua_rawequal(L, -1, -2);
            lua_pop(L, 1);
        }
        if (!found) luaL_error(L, "bad argument #3 to 'padded_batch' (%s has the key '%s', which the elements do not have)", what, lua_tostring(L, -1));
    }
    if (shapes) p->n = nk;
    for (int i = 1; i <= nk; i++) {
        lua_rawgeti(L, specidx, i);
        const char *name = lua_pushfstring(L, ".%s", lua_tostring(L, -1));
        lua_rawgeti(L, specidx, i);
        if (lua_gettable(L, opt) != LUA_TNIL) {
            if (shapes) check_pad_shape(L, -1, p, i - 1, name);
            else p->value[i - 1] = check_pad_value(L, lua_gettop(L), name);
        }
        lua_pop(L, 3);
    }
}

/* ds:padded_batch(n, {padded_shapes=, padding_values=, drop_remainder=false}) or (n, drop_remainder) */
static int ds_padded_batch(lua_State *L) {
    ld_dataset *in = check_ds(L, 1);
    int nargs = lua_gettop(L);
    int64_t n = (int64_t)luaL_checkinteger(L, 2);
    if (n < 1) return luaL_argerror(L, 2, "batch size must be positive");
    ld_padding p;
    memset(&p, 0, sizeof p);
    for (int c = 0; c < LD_ELEMENT_MAX; c++) p.ndim[c] = -1;
    int drop = 0;
    if (nargs < 3) lua_settop(L, 3);    /* the options' slot, nil: the spec goes above it */
    lua_getiuservalue(L, 1, 1);
    int spec = lua_gettop(L);
    if (lua_isboolean(L, 3)) drop = lua_toboolean(L, 3);
    else if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        static const char *const pb_opts[] = {"drop_remainder", "padded_shapes", "padding_values", "name", NULL};
        lb_check_options(L, 3, "Dataset:padded_batch", pb_opts);
        get_opt(L, 3, "drop_remainder");
        drop = lua_toboolean(L, -1);
        lua_pop(L, 1);
        get_opt(L, 3, "padded_shapes");
        read_pad_opt(L, spec, &p, 1);
        lua_pop(L, 1);
        get_opt(L, 3, "padding_values");
        read_pad_opt(L, spec, &p, 0);
        lua_pop(L, 1);
    }
    lua_settop(L, nargs);
    lb_ds *u = new_ds_like(L, 1);
    record_recipe(L, -1, "padded_batch", 1, 2, nargs);
    return set_ds(L, u, ld_dataset_padded_batch(in, n, &p, drop), 2);
}


/* ---- from a Lua producer (data.Dataset.from_generator, data/datasets.lua) ---- */

/* The open function and the elements' spec (registry refs). */
typedef struct { int open, spec; } lua_gen;

static void lua_gen_free(void *p) {
    lua_gen *g = p;
    if (cur_L) {
        luaL_unref(cur_L, LUA_REGISTRYINDEX, g->open);
        luaL_unref(cur_L, LUA_REGISTRYINDEX, g->spec);
    }
    free(g);
}

typedef struct { const lua_gen *g; int *state; ld_element *out; int r; } gen_call;

/* Runs under lua_pcall: open() -> the pass's next function (into a new state ref) */
static int gen_open_trampoline(lua_State *L) {
    gen_call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->g->open);
    lua_call(L, 0, 1);
    if (!lua_isfunction(L, -1)) return luaL_error(L, "internal error: the generator's opener returned a %s", luaL_typename(L, -1));
    *c->state = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

/* Runs under lua_pcall: next() -> the element's values, or nothing at the end */
static int gen_next_trampoline(lua_State *L) {
    gen_call *c = lua_touserdata(L, 1);
    luaL_checkstack(L, 2 * LD_ELEMENT_MAX + 8, "generator element");
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->g->spec);
    int spec = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, *c->state);
    lua_call(L, 0, LUA_MULTRET);
    int nres = lua_gettop(L) - spec;
    if (nres == 0 || lua_isnil(L, spec + 1)) { c->r = 0; return 0; }
    results_to_element(L, spec + 1, nres, spec, c->out, "the generator");
    c->r = 1;
    return 0;
}

static int gen_pcall(gen_call *c, lua_CFunction f) { return lua_protected(f, c, "generator"); }

static void *lua_gen_open(void *ud) {
    int *state = malloc(sizeof *state);
    if (!state) { ld_fail(LD_ENOMEM, "from_generator: out of memory"); return NULL; }
    *state = LUA_NOREF;
    gen_call c = {ud, state, NULL, 0};
    if (gen_pcall(&c, gen_open_trampoline) != LD_OK) { free(state); return NULL; }
    return state;
}

static int lua_gen_next(void *ud, void *state, ld_element *out) {
    gen_call c = {ud, state, out, -1};
    if (gen_pcall(&c, gen_next_trampoline) != LD_OK) return -1;
    return c.r;
}

static void lua_gen_close(void *ud, void *state) {
    (void)ud;
    int *s = state;
    if (cur_L) luaL_unref(cur_L, LUA_REGISTRYINDEX, *s);
    free(s);
}

/* Dataset._from_producer(open): each pass calls open() for a function that
   returns the next element's values (as a map function does), or nothing at the end. */
static int ds_from_producer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lb_ds *u = new_ds(L);
    lua_createtable(L, 0, 1);           /* the elements' spec, known at the first element */
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "pending");
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, -3, 1);
    lua_gen *g = malloc(sizeof *g);
    if (!g) return luaL_error(L, "not enough memory");
    g->spec = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, 1);
    g->open = luaL_ref(L, LUA_REGISTRYINDEX);
    static const ld_generator gen = {lua_gen_open, lua_gen_next, lua_gen_close, 0, 0, 0};
    ld_dataset *d;
    WITH_L(L, d = ld_dataset_from_generator(&gen, g, lua_gen_free, LD_MAP_CALLER_THREAD));
    return set_ds(L, u, d, 0);
}

/* ds:_set_recipe(r): the recipe ds:_recipe() returns (data/datasets.lua's zip) */
static int ds_set_recipe(lua_State *L) {
    luaL_checkudata(L, 1, LB_DATASET_MT);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    lua_setiuservalue(L, 1, 2);
    return 0;
}

/* ================================================================ inspection */

/* ds:_recipe() -> {op=, parent=, args=} (record_recipe), or nil */
static int ds_recipe(lua_State *L) {
    luaL_checkudata(L, 1, LB_DATASET_MT);
    lua_getiuservalue(L, 1, 2);
    return 1;
}

static int ds_cardinality(lua_State *L) {
    lua_pushinteger(L, ld_dataset_cardinality(check_ds(L, 1)));
    return 1;
}

static int ds_len(lua_State *L) {
    int64_t c = ld_dataset_cardinality(check_ds(L, 1));
    if (c == LD_CARD_INFINITE) return luaL_error(L, "the dataset is infinite (see ds:cardinality())");
    if (c < 0) return luaL_error(L, "the length of the dataset is unknown (see ds:cardinality())");
    lua_pushinteger(L, c);
    return 1;
}

static int ds_tostring(lua_State *L) {
    lb_ds *u = luaL_checkudata(L, 1, LB_DATASET_MT);
    if (!u->ds) { lua_pushliteral(L, "Dataset (uninitialised)"); return 1; }
    char buf[1024];
    ld_dataset_describe(u->ds, buf, sizeof buf);
    int64_t c = ld_dataset_cardinality(u->ds);
    if (c >= 0) lua_pushfstring(L, "Dataset %s (%I elements)", buf, (lua_Integer)c);
    else lua_pushfstring(L, "Dataset %s (%s)", buf, c == LD_CARD_INFINITE ? "infinite" : "length unknown");
    int text = lua_gettop(L);
    lua_getiuservalue(L, 1, 1);                 /* a dict's keys */
    int spec = lua_gettop(L), nk = lua_istable(L, spec) ? (int)lua_rawlen(L, spec) : 0;
    if (nk > 0) {
        luaL_Buffer b;                          /* may push a box: absolute indices only */
        luaL_buffinit(L, &b);
        lua_pushvalue(L, text);
        luaL_addvalue(&b);
        luaL_addstring(&b, " of {");
        for (int i = 0; i < nk; i++) {
            if (i) luaL_addstring(&b, ", ");
            lua_rawgeti(L, spec, i + 1);
            luaL_addvalue(&b);
        }
        luaL_addstring(&b, "}");
        luaL_pushresult(&b);
    } else lua_pop(L, 1);
    return 1;
}

/* ================================================================ iteration */

static lb_it *new_iter(lua_State *L, int ds_idx) {
    ld_dataset *ds = check_ds(L, ds_idx);
    lb_it *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->it = NULL;
    u->busy = 0;
    luaL_setmetatable(L, LB_ITER_MT);
    lua_getiuservalue(L, ds_idx, 1);
    lua_setiuservalue(L, -2, 1);
    WITH_L(L, u->it = ld_dataset_iter_new(ds));
    if (!u->it) lb_engine_error(L, 0);
    return u;
}

static void iter_close(lua_State *L, lb_it *u) {
    ld_dataset_iter *it = u->it;
    u->it = NULL;
    WITH_L(L, ld_dataset_iter_free(it));
}

/* Push the next element (a table of tensors) or nil at the end; u is the
   iterator at stack slot idx. */
static int iter_step(lua_State *L, lb_it *u, int idx) {
    if (!u->it) { lua_pushnil(L); return 1; }
    if (u->busy) return luaL_error(L, "a dataset iterator was advanced from inside its own map function");
    ld_element e = {0};
    int r;
    u->busy = 1;
    WITH_L(L, r = ld_dataset_iter_next(u->it, &e));
    u->busy = 0;
    if (r < 0) {
        lua_pushstring(L, ld_error());
        lb_kept_follow(L, -1);      /* a map function's frames (lua_protected) */
        iter_close(L, u);
        return lua_error(L);
    }
    if (r == 0) {
        iter_close(L, u);           /* stop a prefetch thread now, not at collection */
        lua_pushnil(L);
        return 1;
    }
    push_element(L, idx, &e);
    return 1;
}

/* ds(state, prev): the generic-for protocol, see the top of the file. */
static int ds_call(lua_State *L) {
    check_ds(L, 1);
    lua_settop(L, 3);
    lua_getfield(L, LUA_REGISTRYINDEX, LOOPS);
    int loops = lua_gettop(L);
    lb_it *u;
    if (lua_isnil(L, 3)) {
        u = new_iter(L, 1);
    } else {
        lua_pushvalue(L, 3);
        lua_rawget(L, loops);
        u = luaL_testudata(L, -1, LB_ITER_MT);
        if (!u)
            return luaL_error(L, "a dataset called with a previous element that it did not produce; "
                                 "iterate with 'for batch in ds do' or 'for batch in ds:iter() do'");
        lua_pushvalue(L, 3);
        lua_pushnil(L);
        lua_rawset(L, loops);
    }
    int it_idx = lua_gettop(L);
    iter_step(L, u, it_idx);
    if (!lua_isnil(L, -1)) {
        lua_pushvalue(L, -1);
        lua_pushvalue(L, it_idx);
        lua_rawset(L, loops);
    }
    return 1;
}

/* ds:iter() -> iterator, nil, nil, iterator (the 4th value closes it when a for loop ends) */
static int ds_iter(lua_State *L) {
    new_iter(L, 1);
    lua_pushnil(L);
    lua_pushnil(L);
    lua_pushvalue(L, -3);
    return 4;
}

static int it_call(lua_State *L) { return iter_step(L, luaL_checkudata(L, 1, LB_ITER_MT), 1); }

/* it:_skip() -> true, or false at the end: past one element without building
   it where the dataset can (ld_dataset_iter_skip) */
static int it_skip(lua_State *L) {
    lb_it *u = luaL_checkudata(L, 1, LB_ITER_MT);
    if (!u->it) { lua_pushboolean(L, 0); return 1; }
    if (u->busy) return luaL_error(L, "a dataset iterator was advanced from inside its own map function");
    int r;
    u->busy = 1;
    WITH_L(L, r = ld_dataset_iter_skip(u->it));
    u->busy = 0;
    if (r < 0) {
        lua_pushstring(L, ld_error());
        lb_kept_follow(L, -1);      /* a map function's frames (lua_protected) */
        iter_close(L, u);
        return lua_error(L);
    }
    if (r == 0) iter_close(L, u);
    lua_pushboolean(L, r == 1);
    return 1;
}

/* ds:_splittable() -> whether its batches can be split over devices as they
   are gathered (see ld_dataset_splittable) */
static int ds_splittable(lua_State *L) {
    lua_pushboolean(L, ld_dataset_splittable(check_ds(L, 1)));
    return 1;
}

/* The end of a split read (r from ld_dataset_iter_next_split/_part): an
   error raised, or at the end (r == 0) the iterator closed and nil pushed;
   1 when the caller pushes the element. */
static int split_result(lua_State *L, lb_it *u, int r) {
    if (r < 0) {
        lua_pushstring(L, ld_error());
        lb_kept_follow(L, -1);      /* a map function's frames (lua_protected) */
        iter_close(L, u);
        lua_error(L);
    }
    if (r == 0) {
        iter_close(L, u);
        lua_pushnil(L);
    }
    return r;
}
/* a list of the element's tensors, which Lua owns from now on */
static void push_element_list(lua_State *L, ld_element *e) {
    lua_createtable(L, e->n, 0);
    for (int i = 0; i < e->n; i++) {
        ld_tensor *t = e->t[i];
        e->t[i] = NULL;
        lb_push_tensor(L, t, 0);
        lua_rawseti(L, -2, i + 1);
    }
}

/* it:_next_split({device names}) -> {{tensors of replica 0}, ...}, rows;
   nil at the end. The strategies' input path: each replica's rows are
   gathered on its device. */
static int it_next_split(lua_State *L) {
    lb_it *u = luaL_checkudata(L, 1, LB_ITER_MT);
    ld_device *devs[LD_MAX_LOGICAL];
    int n = lb_check_devices(L, 2, devs);
    if (!u->it) { lua_pushnil(L); return 1; }
    ld_element *parts = lua_newuserdatauv(L, sizeof *parts * (size_t)n, 0);   /* freed by the GC */
    int64_t rows = 0;
    int r;
    WITH_L(L, r = ld_dataset_iter_next_split(u->it, n, devs, parts, &rows));
    if (split_result(L, u, r) == 0) return 1;
    lua_createtable(L, n, 0);
    for (int p = 0; p < n; p++) {
        push_element_list(L, &parts[p]);
        lua_rawseti(L, -2, p + 1);
    }
    lua_pushinteger(L, (lua_Integer)rows);
    return 2;
}
/* it:_next_part(n, r, {device}, whole_from) -> {tensors of part r}, {sources
   whole_from.. of every row}, rows, first_row; nil at the end (a worker of
   n reading only its rows, ld_dataset_iter_next_part). whole_from counts from 1. */
static int it_next_part(lua_State *L) {
    lb_it *u = luaL_checkudata(L, 1, LB_ITER_MT);
    int n = (int)luaL_checkinteger(L, 2), r = (int)luaL_checkinteger(L, 3);
    ld_device *devs[LD_MAX_LOGICAL];
    lb_check_devices(L, 4, devs);
    int whole_from = (int)luaL_checkinteger(L, 5) - 1;
    if (!u->it) { lua_pushnil(L); return 1; }
    ld_element *el = lua_newuserdatauv(L, 2 * sizeof *el, 0);   /* freed by the GC */
    int64_t rows = 0, first = 0;
    int st;
    WITH_L(L, st = ld_dataset_iter_next_part(u->it, n, r, devs[0], whole_from, &el[0], &el[1], &rows, &first));
    if (split_result(L, u, st) == 0) return 1;
    push_element_list(L, &el[0]);
    push_element_list(L, &el[1]);
    lua_pushinteger(L, (lua_Integer)rows);
    lua_pushinteger(L, (lua_Integer)first);
    return 4;
}
static int it_close(lua_State *L) {
    iter_close(L, luaL_checkudata(L, 1, LB_ITER_MT));
    return 0;
}
static int it_tostring(lua_State *L) {
    lb_it *u = luaL_checkudata(L, 1, LB_ITER_MT);
    lua_pushstring(L, u->it ? "DatasetIterator" : "DatasetIterator (finished)");
    return 1;
}

/* ================================================================ loaders */

/* Tensors read from files remember the call that read them (data._source_of),
   so a worker on the same machine reads the file itself instead of being
   sent the data. The table is weak: the record goes with the tensor. */
static const char *const SOURCES = "ldist.data.sources";
static void record_source(lua_State *L, int result, const char *fn, int nargs) {
    result = lua_absindex(L, result);
    if (luaL_getsubtable(L, LUA_REGISTRYINDEX, SOURCES) == 0) {
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
    }
    lua_pushvalue(L, result);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, fn);
    lua_setfield(L, -2, "fn");
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "part");
    lua_createtable(L, nargs, 1);
    for (int i = 1; i <= nargs; i++) { lua_pushvalue(L, i); lua_rawseti(L, -2, i); }
    lua_pushinteger(L, nargs);
    lua_setfield(L, -2, "n");
    lua_setfield(L, -2, "args");
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* data._source_of(t) -> {fn=, args=, part=} for a tensor read by load_idx / load_csv, or nil */
static int l_source_of(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, SOURCES);
    lua_pushvalue(L, 1);
    lua_rawget(L, -2);
    return 1;
}

static int l_load_csv(lua_State *L) {
    int nargs = lua_gettop(L);
    const char *path = luaL_checkstring(L, 1);
    ld_csv_options o = {-1, ','};
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (get_opt(L, 2, "header") != LUA_TNIL) o.header = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (get_opt(L, 2, "delimiter") != LUA_TNIL) {
            size_t n;
            const char *d = lua_tolstring(L, -1, &n);
            if (!d || n != 1) return luaL_argerror(L, 2, "delimiter must be a one-character string");
            o.delimiter = d[0];
        }
        lua_pop(L, 1);
    }
    char **names = NULL;
    int nn = 0;
    ld_tensor *t = ld_load_csv(path, &o, &names, &nn);
    if (!t) return lb_engine_error(L, 0);
    lua_createtable(L, nn, 0);           /* may raise: free the names first */
    for (int i = 0; i < nn; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    ld_strings_free(names, nn);
    if (!nn) { lua_pop(L, 1); lua_pushnil(L); }
    lb_push_tensor(L, t, 0);
    lua_insert(L, -2);
    record_source(L, -2, "load_csv", nargs);
    return 2;
}

static int l_load_idx(lua_State *L) {
    int nargs = lua_gettop(L);
    const char *path = luaL_checkstring(L, 1);
    int dt = -1;
    double scale = 1.0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        if (get_opt(L, 2, "dtype") != LUA_TNIL) {
            ld_dtype d;
            if (ld_dtype_from_name(luaL_checkstring(L, -1), &d) != LD_OK) return lb_engine_error(L, 2);
            dt = (int)d;
        }
        lua_pop(L, 1);
        if (get_opt(L, 2, "scale") != LUA_TNIL) {
            int ok;
            scale = lua_tonumberx(L, -1, &ok);
            if (!ok) return luaL_argerror(L, 2, "scale must be a number");
        }
        lua_pop(L, 1);
    }
    lb_push_tensor(L, ld_load_idx_as(path, dt, scale), 0);
    record_source(L, -1, "load_idx", nargs);
    return 1;
}

/* ================================================================ module */

static const luaL_Reg ds_methods[] = {
    {"from_tensor_slices", ds_from_tensor_slices},
    {"range", ds_range},
    {"batch", ds_batch},
    {"shuffle", ds_shuffle},
    {"repeat_", ds_repeat},
    {"repeat", ds_repeat},      /* ds["repeat"](ds, n): `repeat` is a Lua keyword */
    {"take", ds_take},
    {"skip", ds_skip},
    {"prefetch", ds_prefetch},
    {"map", ds_map},
    {"filter", ds_filter},
    {"_zip", ds_zip},          /* data.Dataset.zip (data/datasets.lua) adds the recipe that travels */
    {"shard", ds_shard},
    {"enumerate", ds_enumerate},
    {"unbatch", ds_unbatch},
    {"cache", ds_cache},
    {"padded_batch", ds_padded_batch},
    {"_from_producer", ds_from_producer},
    {"TextLineDataset", ds_text_lines},
    {"_set_recipe", ds_set_recipe},
    {"cardinality", ds_cardinality},
    {"iter", ds_iter},
    {"_splittable", ds_splittable},
    {"_recipe", ds_recipe},
    {NULL, NULL},
};

static const luaL_Reg ds_meta[] = {
    {"__gc", ds_gc},
    {"__call", ds_call},
    {"__len", ds_len},
    {"__tostring", ds_tostring},
    {NULL, NULL},
};

static const luaL_Reg it_methods[] = {
    {"next", it_call},
    {"close", it_close},
    {"_next_split", it_next_split},
    {"_next_part", it_next_part},
    {"_skip", it_skip},
    {NULL, NULL},
};

static const luaL_Reg it_meta[] = {
    {"__call", it_call},
    {"__close", it_close},
    {"__gc", it_close},
    {"__tostring", it_tostring},
    {NULL, NULL},
};

/* data._glob(pattern) -> sorted list of matching paths (glob(3); none: {}) */
static int l_glob(lua_State *L) {
    const char *pat = luaL_checkstring(L, 1);
    glob_t g;
    int r = glob(pat, GLOB_ERR, NULL, &g);
    if (r != 0 && r != GLOB_NOMATCH) {
        if (r == GLOB_ABORTED) return luaL_error(L, "cannot list the files of '%s': a directory could not be read", pat);
        return luaL_error(L, "cannot list the files of '%s': out of memory", pat);
    }
    lua_createtable(L, r ? 0 : (int)g.gl_pathc, 0);
    for (size_t i = 0; !r && i < g.gl_pathc; i++) {   /* glob sorts by default */
        lua_pushstring(L, g.gl_pathv[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    if (!r) globfree(&g);
    return 1;
}

static const luaL_Reg data_funcs[] = {
    {"_glob", l_glob},
    {"load_csv", l_load_csv},
    {"load_idx", l_load_idx},
    {"_source_of", l_source_of},
    {NULL, NULL},
};

int lb_open_data(lua_State *L) {
    /* element -> iterator of the loop that produced it (weak keys: ephemerons) */
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, LOOPS);

    luaL_newmetatable(L, LB_ITER_MT);
    luaL_setfuncs(L, it_meta, 0);
    luaL_newlib(L, it_methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_newtable(L);                                 /* the module */
    luaL_setfuncs(L, data_funcs, 0);
    luaL_newmetatable(L, LB_DATASET_MT);
    luaL_setfuncs(L, ds_meta, 0);
    luaL_newlib(L, ds_methods);                      /* data.Dataset: class and method table */
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__index");
    lua_setfield(L, -3, "Dataset");
    lua_pop(L, 1);                                   /* the metatable */
    lua_pushinteger(L, LD_CARD_INFINITE);
    lua_setfield(L, -2, "INFINITE_CARDINALITY");
    lua_pushinteger(L, LD_CARD_UNKNOWN);
    lua_setfield(L, -2, "UNKNOWN_CARDINALITY");
    lua_pushinteger(L, LD_AUTOTUNE);
    lua_setfield(L, -2, "AUTOTUNE");
    return 1;
}
