/*
 * repr.c - ldist_repr: a value as readable text, for the REPL's auto-print
 * and the kernel's text/plain.
 *
 *     > {1, 2, x = {y = "z"}, f = print}
 *     {1, 2, f = function: builtin: 0x55d1..., x = {y = "z"}}
 *
 * Strings are quoted, tables are nested literals (array part first, then the
 * other keys sorted: names, numbers, the rest), values with __tostring (tensors,
 * models) use it. Output is bounded: REPR_MAX_DEPTH levels, REPR_MAX_ITEMS items
 * per table, about REPR_BUDGET characters in all; cycles print as <cycle>.
 * Nothing here raises: the whole rendering runs under lua_pcall, and so does
 * every __tostring call.
 */
#include "ldist.h"

#include <lauxlib.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define REPR_MAX_DEPTH   3      /* tables nested deeper print as {...} */
#define REPR_MAX_ITEMS   50     /* items shown per table */
#define REPR_BUDGET      4000   /* characters, roughly, in all */
#define REPR_STR_IN_TABLE 200   /* bytes of a string shown inside a table */
#define REPR_SORT_LIMIT  2000   /* hash keys sorted when there are at most this many */
#define REPR_WIDTH       78     /* a table fits on one line up to this column */

typedef struct {
    size_t used;     /* characters produced so far */
    int path;        /* stack index of the table of tables being rendered (cycles) */
} repr_state;

static void repr_value(lua_State *L, int idx, int depth, int indent, repr_state *st);

static int over_budget(const repr_state *st) { return st->used >= REPR_BUDGET; }

/* ---- strings -------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len;
    if (s[0] < 0x80) return 1;
    else if ((s[0] & 0xE0) == 0xC0 && s[0] >= 0xC2) len = 2;
    else if ((s[0] & 0xF0) == 0xE0) len = 3;
    else if ((s[0] & 0xF8) == 0xF0 && s[0] <= 0xF4) len = 4;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* Push s quoted as a Lua literal, cut after `limit` bytes. */
static void push_quoted(lua_State *L, const char *s, size_t len, size_t limit) {
    luaL_Buffer b;
    char q = (memchr(s, '"', len) && !memchr(s, '\'', len)) ? '\'' : '"';
    size_t shown = len > limit ? limit : len;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, q);
    for (size_t i = 0; i < shown;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '\n': esc = "\\n"; break;
        case '\t': esc = "\\t"; break;
        case '\r': esc = "\\r"; break;
        case '\\': esc = "\\\\"; break;
        case '\a': esc = "\\a"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\v': esc = "\\v"; break;
        }
        if (esc) {
            luaL_addstring(&b, esc);
            i++;
        } else if (c == (unsigned char)q) {
            luaL_addchar(&b, '\\');
            luaL_addchar(&b, q);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char tmp[8];
            snprintf(tmp, sizeof tmp, "\\%03d", c);
            luaL_addstring(&b, tmp);
            i++;
        } else {
            size_t n = utf8_len((const unsigned char *)s + i, len - i);
            if (n == 0) {                       /* not UTF-8: show the byte */
                char tmp[8];
                snprintf(tmp, sizeof tmp, "\\x%02X", c);
                luaL_addstring(&b, tmp);
                n = 1;
            } else {
                luaL_addlstring(&b, s + i, n);
            }
            i += n;
        }
    }
    luaL_addchar(&b, q);
    if (shown < len) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "... (%zu bytes)", len);
        luaL_addstring(&b, tmp);
    }
    luaL_pushresult(&b);
}

/* ---- __tostring, protected ------------------------------------------------- */

static int tostring_k(lua_State *L) {
    luaL_tolstring(L, 1, NULL);
    return 1;
}

/* Push tostring(value at idx); an error becomes "<error in __tostring: msg>". */
static void push_tostring(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, tostring_k);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        lua_pushfstring(L, "<error in __tostring: %s>",
                        msg ? msg : luaL_typename(L, -1));
        lua_remove(L, -2);
    }
}

/* Does the value at idx have a __tostring metamethod? */
static int has_tostring(lua_State *L, int idx) {
    int t = luaL_getmetafield(L, idx, "__tostring");
    if (t != LUA_TNIL) lua_pop(L, 1);
    return t != LUA_TNIL;
}

/* ---- tables ---------------------------------------------------------------- */

static const char *const lua_keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while", NULL,
};

static int is_identifier(const char *s, size_t len) {
    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
    for (int i = 0; lua_keywords[i]; i++)
        if (!strcmp(s, lua_keywords[i])) return 0;
    return 1;
}

typedef struct {
    int rank;            /* 0 name, 1 other string, 2 number, 3 boolean, 4 the rest */
    const char *s;       /* string keys (anchored in the key table) */
    size_t len;
    lua_Number num;
    int pos;             /* index of the key in the key table */
} key_entry;

/* "k2" before "k10": runs of digits compare as numbers. */
static int natural_cmp(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        if (isdigit((unsigned char)a[i]) && isdigit((unsigned char)b[j])) {
            size_t si = i, sj = j;
            while (si < na && a[si] == '0') si++;
            while (sj < nb && b[sj] == '0') sj++;
            size_t ei = si, ej = sj;
            while (ei < na && isdigit((unsigned char)a[ei])) ei++;
            while (ej < nb && isdigit((unsigned char)b[ej])) ej++;
            if (ei - si != ej - sj) return ei - si < ej - sj ? -1 : 1;
            int c = memcmp(a + si, b + sj, ei - si);
            if (c) return c;
            i = ei;
            j = ej;
        } else {
            if (a[i] != b[j]) return (unsigned char)a[i] < (unsigned char)b[j] ? -1 : 1;
            i++;
            j++;
        }
    }
    return (na - i > nb - j) - (na - i < nb - j);
}

static int key_cmp(const void *pa, const void *pb) {
    const key_entry *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank - b->rank;
    if (a->rank <= 1) return natural_cmp(a->s, a->len, b->s, b->len);
    if (a->rank <= 3 && a->num != b->num) return a->num < b->num ? -1 : 1;
    return a->pos - b->pos;
}

/* Push the text of a key: `name`, or `[repr]`. */
static void push_key(lua_State *L, int kidx, repr_state *st) {
    size_t len;
    if (lua_type(L, kidx) == LUA_TSTRING) {
        const char *s = lua_tolstring(L, kidx, &len);
        if (is_identifier(s, len)) {
            lua_pushvalue(L, kidx);
            st->used += len;
            return;
        }
    }
    if (lua_type(L, kidx) == LUA_TTABLE && !has_tostring(L, kidx)) {
        lua_pushfstring(L, "[<table: %p>]", lua_topointer(L, kidx));
    } else {
        repr_value(L, kidx, REPR_MAX_DEPTH, 0, st);
        lua_pushfstring(L, "[%s]", lua_tostring(L, -1));
        lua_remove(L, -2);
    }
}

/* Indent every line after the first of the string at the top by `n` spaces. */
static void reindent(lua_State *L, int n) {
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (!memchr(s, '\n', len) || n <= 0) return;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < len; i++) {
        luaL_addchar(&b, s[i]);
        if (s[i] == '\n')
            for (int k = 0; k < n; k++) luaL_addchar(&b, ' ');
    }
    luaL_pushresult(&b);
    lua_remove(L, -2);
}

/* Lay out the `n` item strings at the top of the stack as one table literal
   (replacing them); `more` is the count of items not shown. */
static void join_items(lua_State *L, int n, lua_Integer more, int truncated, int indent,
                       const char *prefix) {
    int first = lua_gettop(L) - n + 1;
    size_t total = 0;
    int multiline = 0;
    for (int i = first; i < first + n; i++) {
        size_t len;
        const char *s = lua_tolstring(L, i, &len);
        total += len + 2;
        if (memchr(s, '\n', len)) multiline = 1;
    }
    char tail[64] = "";
    if (more > 0) snprintf(tail, sizeof tail, "... (%lld more)", (long long)more);
    else if (truncated) snprintf(tail, sizeof tail, "...");
    total += strlen(tail) + strlen(prefix) + 2;

    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, prefix);
    if (!multiline && indent + total <= REPR_WIDTH) {
        luaL_addchar(&b, '{');
        for (int i = first; i < first + n; i++) {
            if (i > first) luaL_addstring(&b, ", ");
            lua_pushvalue(L, i);
            luaL_addvalue(&b);
        }
        if (*tail) {
            if (n) luaL_addstring(&b, ", ");
            luaL_addstring(&b, tail);
        }
        luaL_addchar(&b, '}');
    } else {
        /* One item per line, except that short one-line items share lines. */
        int col = 0;
        luaL_addchar(&b, '{');
        for (int i = first; i <= first + n; i++) {
            size_t len;
            const char *s;
            if (i < first + n) {
                s = lua_tolstring(L, i, &len);
            } else {
                if (!*tail) break;
                s = tail;
                len = strlen(tail);
            }
            int long_item = memchr(s, '\n', len) != NULL;
            if (col == 0 || long_item || col + len + 2 > REPR_WIDTH) {
                luaL_addchar(&b, '\n');
                for (int k = 0; k < indent + 2; k++) luaL_addchar(&b, ' ');
                col = indent + 2;
            } else {
                luaL_addchar(&b, ' ');
                col++;
            }
            luaL_addlstring(&b, s, len);
            col += (int)len;
            if (i < first + n) {
                luaL_addchar(&b, ',');
                col++;
            }
            if (long_item) col = REPR_WIDTH;   /* the next item starts a new line */
        }
        luaL_addchar(&b, '\n');
        for (int k = 0; k < indent; k++) luaL_addchar(&b, ' ');
        luaL_addchar(&b, '}');
    }
    luaL_pushresult(&b);
    if (n > 0) {                        /* the result replaces the items */
        lua_replace(L, first);
        lua_settop(L, first);
    }
}

static void repr_table(lua_State *L, int t, int depth, int indent, repr_state *st) {
    char prefix[80] = "";
    if (luaL_getmetafield(L, t, "__name") != LUA_TNIL) {
        if (lua_type(L, -1) == LUA_TSTRING) snprintf(prefix, sizeof prefix, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pushvalue(L, t);
    if (lua_rawget(L, st->path) != LUA_TNIL) {
        lua_pop(L, 1);
        lua_pushliteral(L, "<cycle>");
        st->used += 7;
        return;
    }
    lua_pop(L, 1);
    lua_Unsigned len = lua_rawlen(L, t);
    lua_pushnil(L);
    int empty = !lua_next(L, t);
    if (!empty) lua_pop(L, 2);
    if (empty) {
        lua_pushfstring(L, "%s{}", prefix);
        st->used += 2;
        return;
    }
    if (depth >= REPR_MAX_DEPTH) {
        lua_pushfstring(L, "%s{...}", prefix);
        st->used += 5;
        return;
    }
    luaL_checkstack(L, REPR_MAX_ITEMS + 20, "repr");
    lua_pushvalue(L, t);
    lua_pushboolean(L, 1);
    lua_rawset(L, st->path);

    int base = lua_gettop(L);
    int shown = 0, truncated = 0;
    lua_Integer array_shown = 0, keys_shown = 0;

    /* The array part: t[1..len], holes as nil. */
    for (lua_Unsigned i = 1; i <= len; i++) {
        if (shown >= REPR_MAX_ITEMS || over_budget(st)) {
            truncated = 1;
            break;
        }
        lua_rawgeti(L, t, (lua_Integer)i);
        repr_value(L, -1, depth + 1, indent + 2, st);
        lua_remove(L, -2);
        st->used += 2;
        shown++;
        array_shown++;
    }

    /* The other keys, collected into a key table (anchors strings) and sorted. */
    lua_newtable(L);
    int keys = lua_gettop(L);
    int nkeys = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (lua_isinteger(L, -1)) {
            lua_Integer k = lua_tointeger(L, -1);
            if (k >= 1 && (lua_Unsigned)k <= len) continue;
        }
        nkeys++;
        if (nkeys <= REPR_SORT_LIMIT) {
            lua_pushvalue(L, -1);
            lua_rawseti(L, keys, nkeys);
        }
    }
    int nstored = nkeys < REPR_SORT_LIMIT ? nkeys : REPR_SORT_LIMIT;
    key_entry *ents = lua_newuserdatauv(L, sizeof(key_entry) * (size_t)(nstored ? nstored : 1), 0);
    for (int i = 0; i < nstored; i++) {
        key_entry *e = &ents[i];
        memset(e, 0, sizeof *e);
        e->pos = i + 1;
        lua_rawgeti(L, keys, i + 1);
        switch (lua_type(L, -1)) {
        case LUA_TSTRING:
            e->s = lua_tolstring(L, -1, &e->len);
            e->rank = is_identifier(e->s, e->len) ? 0 : 1;
            break;
        case LUA_TNUMBER: e->rank = 2; e->num = lua_tonumber(L, -1); break;
        case LUA_TBOOLEAN: e->rank = 3; e->num = lua_toboolean(L, -1); break;
        default: e->rank = 4; break;
        }
        lua_pop(L, 1);
    }
    if (nkeys <= REPR_SORT_LIMIT) qsort(ents, (size_t)nstored, sizeof *ents, key_cmp);
    for (int i = 0; i < nstored; i++) {
        if (shown >= REPR_MAX_ITEMS || over_budget(st)) {
            truncated = 1;
            break;
        }
        lua_rawgeti(L, keys, ents[i].pos);          /* key */
        push_key(L, lua_gettop(L), st);             /* key, key text */
        lua_rawgeti(L, keys, ents[i].pos);
        lua_rawget(L, t);                           /* key, key text, value */
        repr_value(L, -1, depth + 1, indent + 2, st);
        lua_remove(L, -2);                          /* key, key text, value text */
        lua_pushfstring(L, "%s = %s", lua_tostring(L, -2), lua_tostring(L, -1));
        st->used += 5;
        lua_replace(L, -4);                         /* item, key text, value text */
        lua_pop(L, 2);
        lua_insert(L, keys);                        /* keep the items contiguous */
        keys++;
        shown++;
        keys_shown++;
    }
    lua_settop(L, keys - 1);                        /* drop the key table and scratch */
    lua_Integer more = ((lua_Integer)len - array_shown) + (nkeys - keys_shown);
    join_items(L, lua_gettop(L) - base, more, truncated, indent, prefix);

    lua_pushvalue(L, t);
    lua_pushnil(L);
    lua_rawset(L, st->path);
}

/* ---- any value ------------------------------------------------------------- */

/* Push the text of the value at idx. */
static void repr_value(lua_State *L, int idx, int depth, int indent, repr_state *st) {
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 10, "repr");
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        size_t left = st->used < REPR_BUDGET ? REPR_BUDGET - st->used : 0;
        size_t limit = depth > 0 ? REPR_STR_IN_TABLE : REPR_BUDGET;
        if (limit > left) limit = left > 16 ? left : 16;
        push_quoted(L, s, len, limit);
        break;
    }
    case LUA_TTABLE:
        if (!has_tostring(L, idx)) {
            repr_table(L, idx, depth, indent, st);
            return;
        }
        /* fall through */
    default:
        push_tostring(L, idx);
        if (depth > 0) reindent(L, indent);
        break;
    }
    size_t len;
    lua_tolstring(L, -1, &len);
    st->used += len;
}

static int repr_k(lua_State *L) {
    /* 1: the value */
    repr_state st = {0, 0};
    lua_newtable(L);
    st.path = lua_gettop(L);
    repr_value(L, 1, 0, 0, &st);
    return 1;
}

void ldist_repr(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (!lua_checkstack(L, 4)) return;   /* cannot happen in practice; nothing to push to */
    lua_pushcfunction(L, repr_k);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
        lua_pushfstring(L, "<cannot print a %s value: %s>", luaL_typename(L, idx), msg);
        lua_remove(L, -2);
    }
}
