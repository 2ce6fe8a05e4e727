/*
 * json.c - ldist.json: encode and decode JSON (jansson), for TF_CONFIG, the
 * cluster's messages and the model files (model:to_json, model:save).
 */
#include "lbind.h"

#include <jansson.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define JSON_MAX_DEPTH 64   /* arrays and objects inside each other, both ways */

/* 1 when j nests arrays and objects deeper than `left` more levels */
static int too_deep(json_t *j, int left) {
    if (!json_is_object(j) && !json_is_array(j)) return 0;
    if (left == 0) return 1;
    const char *k;
    size_t i;
    json_t *v;
    if (json_is_object(j)) { json_object_foreach(j, k, v) if (too_deep(v, left - 1)) return 1; }
    else json_array_foreach(j, i, v) if (too_deep(v, left - 1)) return 1;
    return 0;
}

/* j is checked by too_deep first, so the recursion is bounded */
static void push_json(lua_State *L, json_t *j, int depth) {
    luaL_checkstack(L, 4, "json");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        lua_newtable(L);
        json_object_foreach(j, k, v) { push_json(L, v, depth + 1); lua_setfield(L, -2, k); }
        return;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *v;
        lua_newtable(L);
        json_array_foreach(j, i, v) { push_json(L, v, depth + 1); lua_rawseti(L, -2, (lua_Integer)i + 1); }
        return;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); return;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); return;
    case JSON_REAL: lua_pushnumber(L, json_real_value(j)); return;
    case JSON_TRUE: lua_pushboolean(L, 1); return;
    case JSON_FALSE: lua_pushboolean(L, 0); return;
    default: lua_pushnil(L); return;
    }
}

/* json.decode(text) -> value, or nil and a message */
static int c_json_decode(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    json_error_t err;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &err);
    if (!j) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s (line %d, column %d)", err.text, err.line, err.column);
        return 2;
    }
    if (too_deep(j, JSON_MAX_DEPTH)) {
        json_decref(j);
        return luaL_error(L, "json.decode: the document nests arrays and objects deeper than %d levels", JSON_MAX_DEPTH);
    }
    push_json(L, j, 0);
    json_decref(j);
    return 1;
}

static json_t *to_json(lua_State *L, int idx, int depth) {
    idx = lua_absindex(L, idx);
    if (depth > JSON_MAX_DEPTH) luaL_error(L, "json.encode: nested deeper than %d levels", JSON_MAX_DEPTH);
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER: return lua_isinteger(L, idx) ? json_integer(lua_tointeger(L, idx)) : json_real(lua_tonumber(L, idx));
    case LUA_TSTRING: { size_t n; const char *s = lua_tolstring(L, idx, &n); return json_stringn(s, n); }
    case LUA_TTABLE: {
        lua_Integer len = luaL_len(L, idx);
        if (len > 0) {
            json_t *a = json_array();
            for (lua_Integer i = 1; i <= len; i++) { lua_geti(L, idx, i); json_array_append_new(a, to_json(L, -1, depth + 1)); lua_pop(L, 1); }
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (lua_type(L, -2) == LUA_TSTRING) json_object_set_new(o, lua_tostring(L, -2), to_json(L, -1, depth + 1));
            lua_pop(L, 1);
        }
        return o;
    }
    default: return json_null();
    }
}

/* What JSON cannot hold is an error naming where it is, found before
   anything is built (so nothing leaks): a NaN or an infinity (jansson
   refuses them, and the key would vanish), and in an object a key that is
   not a string. path: where idx is ("" at the top), for the message. */
static void check_encodable(lua_State *L, int idx, int depth, const char *path) {
    idx = lua_absindex(L, idx);
    if (depth > 64) luaL_error(L, "json.encode: nested too deeply");
    if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx)) {
        double v = lua_tonumber(L, idx);
        if (!isfinite(v))
            luaL_error(L, "json.encode: the value at %s is %s, which JSON cannot hold (replace it, or give it as a string)",
                       *path ? path : "the top", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    if (lua_type(L, idx) != LUA_TTABLE) return;
    char sub[256];
    lua_Integer len = luaL_len(L, idx);
    if (len > 0) {
        for (lua_Integer i = 1; i <= len; i++) {
            snprintf(sub, sizeof sub, "%s[%lld]", path, (long long)i);
            lua_geti(L, idx, i);
            check_encodable(L, -1, depth + 1, sub);
            lua_pop(L, 1);
        }
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pushvalue(L, -2);
            const char *k = luaL_tolstring(L, -1, NULL);
            luaL_error(L, "json.encode: the key %s%s%s is a %s; a JSON object's keys are strings", k, *path ? " in " : "",
                       path, luaL_typename(L, -4));
        }
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", lua_tostring(L, -2));
        check_encodable(L, -1, depth + 1, sub);
        lua_pop(L, 1);
    }
}

/* json.encode(value) -> text: a table with a positive length is an array, else an
   object of its string keys (sorted); other values are null. A NaN, an
   infinity or a key that is not a string is an error naming where it is. */
static int c_json_encode(lua_State *L) {
    check_encodable(L, 1, 0, "");
    json_t *j = to_json(L, 1, 0);
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    json_decref(j);
    if (!s) return luaL_error(L, "json.encode failed");
    lua_pushstring(L, s);
    free(s);
    return 1;
}

int lb_open_json(lua_State *L) {
    static const luaL_Reg f[] = {{"encode", c_json_encode}, {"decode", c_json_decode}, {NULL, NULL}};
    luaL_newlib(L, f);
    return 1;
}
