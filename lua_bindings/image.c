/*
 * image.c - ldist._image: the C half of data.image_dataset_from_directory,
 * io.load_image and io.save_image (lua_bindings/lua/data/images.lua wraps
 * them; engine/ld_image.h does the work).
 *
 *   _image.index(dir, class_names|nil, follow_links, shuffle, seed)
 *       -> paths, labels (0-based), class_names, skipped (.bmp/.gif files left out)
 *   _image.dataset(paths, labels|nil, {height=, width=, channels=, batch_size= (0: none),
 *       label_mode="int"|"categorical"|"binary"|"none", num_classes=, shuffle=, seed=}) -> Dataset
 *   _image.load(path, channels) -> uint8 tensor [h, w, channels]
 *   _image.save(path, uint8 tensor [h, w, c], quality)
 *   _image.resize(uint8 tensor [h, w, c], oh, ow) -> float32 [oh, ow, c] (tf.image.resize bilinear)
 *   _image.np_shuffle(seed, n) -> {0-based permutation} (np.random.RandomState(seed).shuffle)
 */
#include "lbind.h"
#include "ld_core.h"
#include "ld_image.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

static uint32_t check_seed(lua_State *L, int idx) {
    lua_Integer s = luaL_checkinteger(L, idx);
    if (s < 0 || s > 0xffffffffLL) luaL_argerror(L, idx, "seed must be in 0..2^32-1 (numpy's RandomState)");
    return (uint32_t)s;
}

/* an index that is freed when the Lua value at the top is collected */
typedef struct { ld_image_index ix; } ix_box;
static int ix_gc(lua_State *L) { ld_image_index_free(&((ix_box *)lua_touserdata(L, 1))->ix); return 0; }

static int l_index(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    int nnames = 0;
    const char **names = NULL;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        nnames = (int)lua_rawlen(L, 2);
        names = lua_newuserdatauv(L, sizeof(char *) * (nnames + 1), 0);
        for (int i = 0; i < nnames; i++) {
            lua_rawgeti(L, 2, i + 1);
            if (!lua_isstring(L, -1)) return luaL_argerror(L, 2, "class_names must be a list of strings");
            names[i] = lua_tostring(L, -1);
            lua_rawsetp(L, LUA_REGISTRYINDEX, names + i);   /* kept alive until the end of the call */
        }
    }
    int follow = lua_toboolean(L, 3), shuffle = lua_toboolean(L, 4);
    uint32_t seed = shuffle ? check_seed(L, 5) : 0;
    ix_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, ix_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int st = ld_image_index_directory(dir, names, nnames, follow, shuffle, seed, &b->ix);
    for (int i = 0; i < nnames; i++) { lua_pushnil(L); lua_rawsetp(L, LUA_REGISTRYINDEX, names + i); }
    if (st != LD_OK) return lb_engine_error(L, 0);
    lua_createtable(L, (int)b->ix.n, 0);
    lua_createtable(L, (int)b->ix.n, 0);
    for (int64_t i = 0; i < b->ix.n; i++) {
        lua_pushstring(L, b->ix.paths[i]);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, b->ix.labels[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_createtable(L, b->ix.nclasses, 0);
    for (int i = 0; i < b->ix.nclasses; i++) {
        lua_pushstring(L, b->ix.class_names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, b->ix.skipped);
    ld_image_index_free(&b->ix);
    return 4;
}

static lua_Integer opt_int(lua_State *L, int t, const char *k, lua_Integer def) {
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? def : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return v;
}

static int l_dataset(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    int64_t n = (int64_t)lua_rawlen(L, 1);
    ld_image_opts o = {0};
    o.height = (int)opt_int(L, 3, "height", 256);
    o.width = (int)opt_int(L, 3, "width", 256);
    o.channels = (int)opt_int(L, 3, "channels", 3);
    o.batch_size = opt_int(L, 3, "batch_size", 32);
    o.num_classes = (int)opt_int(L, 3, "num_classes", 0);
    lua_getfield(L, 3, "shuffle");
    o.shuffle = lua_toboolean(L, -1);
    lua_pop(L, 1);
    o.seed = (uint64_t)opt_int(L, 3, "seed", 0);
    lua_getfield(L, 3, "label_mode");
    const char *lm = luaL_optstring(L, -1, "int");
    if (!strcmp(lm, "int")) o.label_mode = LD_IMAGE_LABELS_INT;
    else if (!strcmp(lm, "categorical")) o.label_mode = LD_IMAGE_LABELS_CATEGORICAL;
    else if (!strcmp(lm, "binary")) o.label_mode = LD_IMAGE_LABELS_BINARY;
    else if (!strcmp(lm, "none")) o.label_mode = LD_IMAGE_LABELS_NONE;
    else return luaL_error(L, "label_mode must be \"int\", \"categorical\", \"binary\" or nil, not \"%s\"", lm);
    lua_pop(L, 1);
    const char **paths = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0);
    int32_t *labels = lua_newuserdatauv(L, sizeof(int32_t) * (size_t)(n ? n : 1), 0);
    int has_labels = lua_istable(L, 2);
    for (int64_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        paths[i] = lua_tostring(L, -1);      /* the strings live in table 1 */
        if (!paths[i]) return luaL_argerror(L, 1, "paths must be strings");
        lua_pop(L, 1);
        if (has_labels) {
            lua_rawgeti(L, 2, i + 1);
            labels[i] = (int32_t)luaL_checkinteger(L, -1);
            lua_pop(L, 1);
        }
    }
    if (!has_labels) o.label_mode = LD_IMAGE_LABELS_NONE;
    return lb_push_dataset(L, ld_image_dataset(n, paths, has_labels ? labels : NULL, &o));
}

static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int c = (int)luaL_optinteger(L, 2, 3);
    uint8_t *pix;
    int h, w;
    if (ld_image_load(path, c, &pix, &h, &w) != LD_OK) return lb_engine_error(L, 0);
    int64_t shape[3] = {h, w, c};
    ld_tensor *t = ld_tensor_from_data(LD_U8, 3, shape, pix, NULL);
    free(pix);
    lb_push_tensor(L, t, 0);
    return 1;
}

static int l_save(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    ld_tensor *t = lb_check_tensor(L, 2);
    int q = (int)luaL_optinteger(L, 3, 95);
    if (t->dtype != LD_U8) return luaL_argerror(L, 2, "a uint8 tensor expected (values 0..255)");
    if (t->ndim != 3 && t->ndim != 2) return luaL_argerror(L, 2, "an image [h, w, c] or [h, w] expected");
    ld_tensor *c = ld_contiguous(t);
    if (!c) return lb_engine_error(L, 2);
    const uint8_t *p = ld_tensor_data(c);
    int st = p ? ld_image_save(path, p, (int)t->shape[0], (int)t->shape[1], t->ndim == 3 ? (int)t->shape[2] : 1, q) : ld_error_status();
    ld_tensor_release(c);
    if (st != LD_OK) return lb_engine_error(L, 0);
    return 0;
}

static int l_resize(lua_State *L) {
    ld_tensor *t = lb_check_tensor(L, 1);
    int oh = (int)luaL_checkinteger(L, 2), ow = (int)luaL_checkinteger(L, 3);
    if (t->dtype != LD_U8 || t->ndim != 3) return luaL_argerror(L, 1, "a uint8 tensor [h, w, c] expected");
    if (oh < 1 || ow < 1) return luaL_argerror(L, 2, "sizes must be positive");
    ld_tensor *c = ld_contiguous(t);
    if (!c) return lb_engine_error(L, 1);
    int64_t shape[3] = {oh, ow, t->shape[2]};
    ld_tensor *o = ld_tensor_empty(LD_F32, 3, shape, NULL);
    const uint8_t *p = ld_tensor_data(c);
    float *q = o ? ld_tensor_data(o) : NULL;
    if (p && q) ld_image_resize_bilinear(p, (int)t->shape[0], (int)t->shape[1], (int)t->shape[2], q, oh, ow);
    ld_tensor_release(c);
    if (!p || !q) { ld_tensor_release(o); return lb_engine_error(L, 0); }
    lb_push_tensor(L, o, 0);
    return 1;
}

static int l_np_shuffle(lua_State *L) {
    uint32_t seed = check_seed(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > (1 << 26)) return luaL_argerror(L, 2, "n out of range");
    int64_t *x = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
    for (int64_t i = 0; i < n; i++) x[i] = i;
    ld_np_shuffle_i64(seed, n, x);
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) { lua_pushinteger(L, x[i]); lua_rawseti(L, -2, i + 1); }
    return 1;
}

/* max_pixels([n]) -> the limit before the call; n = 0 or false: no limit */
static int l_max_pixels(lua_State *L) {
    lua_Integer old = (lua_Integer)ld_image_max_pixels();
    if (!lua_isnoneornil(L, 1)) {
        lua_Integer n = lua_toboolean(L, 1) ? luaL_checkinteger(L, 1) : 0;
        luaL_argcheck(L, n >= 0, 1, "the pixel limit must be a positive integer (0 or false: no limit)");
        ld_image_set_max_pixels((int64_t)n);
    }
    lua_pushinteger(L, old);
    return 1;
}

static const luaL_Reg image_funcs[] = {
    {"max_pixels", l_max_pixels},
    {"index", l_index},
    {"dataset", l_dataset},
    {"load", l_load},
    {"save", l_save},
    {"resize", l_resize},
    {"np_shuffle", l_np_shuffle},
    {NULL, NULL},
};

int lb_open_image(lua_State *L) {
    luaL_newlib(L, image_funcs);
    return 1;
}
