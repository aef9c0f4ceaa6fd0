/*
 * fake_json.h -- TEST DOUBLE helper: a small JSON reader (objects, arrays,
 * strings, numbers, literals) shared by the fake NVML (fake_nvml.c) and the
 * fake CUDA runtime (../fake_cuda/fake_cudart.c), which read the same fake
 * node configuration. Static functions only: each library gets its own copy
 * and exports nothing from here. Not product code.
 */
#ifndef FAKE_JSON_H
#define FAKE_JSON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jval {
    jtype t;
    int b;
    double num;
    char *str;
    size_t n;
    char **keys;          /* J_OBJ */
    struct jval **items;  /* J_ARR and J_OBJ values */
} jval;

typedef struct {
    const char *s, *p;
    char err[200];
} jparser;

static void jfree(jval *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys) free(v->keys[i]);
        jfree(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->str);
    free(v);
}

static void jerr(jparser *ps, const char *what) {
    if (!ps->err[0])
        snprintf(ps->err, sizeof ps->err, "%s at byte %ld", what, (long)(ps->p - ps->s));
}

static void jws(jparser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static jval *jnew(jtype t) {
    jval *v = calloc(1, sizeof *v);
    if (v) v->t = t;
    return v;
}

static int jpush(jval *v, char *key, jval *item) {
    char **k = v->keys;
    if (v->t == J_OBJ) {
        k = realloc(v->keys, (v->n + 1) * sizeof *k);
        if (!k) return -1;
        v->keys = k;
        k[v->n] = key;
    }
    jval **it = realloc(v->items, (v->n + 1) * sizeof *it);
    if (!it) return -1;
    v->items = it;
    it[v->n++] = item;
    return 0;
}

static void utf8_put(char **o, unsigned cp) {
    if (cp < 0x80) {
        *(*o)++ = (char)cp;
    } else if (cp < 0x800) {
        *(*o)++ = (char)(0xC0 | (cp >> 6));
        *(*o)++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *(*o)++ = (char)(0xE0 | (cp >> 12));
        *(*o)++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *(*o)++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *(*o)++ = (char)(0xF0 | (cp >> 18));
        *(*o)++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *(*o)++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *(*o)++ = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static char *jstring(jparser *ps) {
    /* ps->p is at the opening quote; the decoded text is never longer than the source */
    const char *start = ++ps->p;
    size_t cap = 0;
    while (start[cap] && start[cap] != '"') cap += (start[cap] == '\\' && start[cap + 1]) ? 2 : 1;
    char *buf = malloc(cap + 4), *o = buf;
    if (!buf) { jerr(ps, "out of memory"); return NULL; }
    while (*ps->p && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) { jerr(ps, "control character in string"); free(buf); return NULL; }
        if (c != '\\') { *o++ = (char)c; ps->p++; continue; }
        ps->p++;
        switch (*ps->p) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(ps->p + 1, &cp)) { jerr(ps, "bad \\u escape"); free(buf); return NULL; }
            ps->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && ps->p[1] == '\\' && ps->p[2] == 'u' &&
                !hex4(ps->p + 3, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                ps->p += 6;
            }
            utf8_put(&o, cp); /* at most 4 bytes for the 6 or 12 source bytes */
            break;
        }
        default: jerr(ps, "bad escape"); free(buf); return NULL;
        }
        ps->p++;
    }
    if (*ps->p != '"') { jerr(ps, "unterminated string"); free(buf); return NULL; }
    ps->p++;
    *o = '\0';
    return buf;
}

static jval *jvalue(jparser *ps, int depth) {
    jws(ps);
    if (depth > 32) { jerr(ps, "nesting too deep"); return NULL; }
    char c = *ps->p;
    jval *v = NULL;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        v = jnew(c == '{' ? J_OBJ : J_ARR);
        if (!v) { jerr(ps, "out of memory"); return NULL; }
        ps->p++;
        jws(ps);
        if (*ps->p == close) { ps->p++; return v; }
        for (;;) {
            char *key = NULL;
            jws(ps);
            if (v->t == J_OBJ) {
                if (*ps->p != '"') { jerr(ps, "expected a key"); jfree(v); return NULL; }
                key = jstring(ps);
                if (!key) { jfree(v); return NULL; }
                jws(ps);
                if (*ps->p != ':') { jerr(ps, "expected ':'"); free(key); jfree(v); return NULL; }
                ps->p++;
            }
            jval *item = jvalue(ps, depth + 1);
            if (!item || jpush(v, key, item)) {
                jerr(ps, "out of memory");
                free(key); jfree(item); jfree(v);
                return NULL;
            }
            jws(ps);
            if (*ps->p == ',') { ps->p++; continue; }
            if (*ps->p == close) { ps->p++; return v; }
            jerr(ps, "expected ',' or a closing bracket");
            jfree(v);
            return NULL;
        }
    }
    if (c == '"') {
        char *s = jstring(ps);
        if (!s) return NULL;
        v = jnew(J_STR);
        if (!v) { free(s); jerr(ps, "out of memory"); return NULL; }
        v->str = s;
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char *end;
        errno = 0;
        double d = strtod(ps->p, &end);
        if (end == ps->p || errno) { jerr(ps, "bad number"); return NULL; }
        ps->p = end;
        v = jnew(J_NUM);
        if (v) v->num = d;
        return v;
    }
    static const struct { const char *word; jtype t; int b; } lits[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t len = strlen(lits[i].word);
        if (!strncmp(ps->p, lits[i].word, len)) {
            ps->p += len;
            v = jnew(lits[i].t);
            if (v) v->b = lits[i].b;
            return v;
        }
    }
    jerr(ps, "unexpected character");
    return NULL;
}

static jval *jget(const jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

/* Parse the JSON object in `path`; NULL with `err` set (naming the file) when it cannot. */
static jval *jload_object(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 4096, len = 0, got;
    char *text = malloc(cap);
    while (text && (got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *bigger = realloc(text, cap *= 2);
            if (!bigger) free(text);
            text = bigger;
        }
    }
    fclose(f);
    if (!text) { snprintf(err, errlen, "out of memory reading %s", path); return NULL; }
    text[len] = '\0';
    jparser ps = {text, text, ""};
    jval *root = jvalue(&ps, 0);
    if (root) {
        jws(&ps);
        if (*ps.p) { jerr(&ps, "trailing text"); jfree(root); root = NULL; }
    }
    free(text);
    if (!root || root->t != J_OBJ) {
        snprintf(err, errlen, "%s is not a JSON object: %s", path,
                 ps.err[0] ? ps.err : "not an object");
        jfree(root);
        return NULL;
    }
    return root;
}

#endif
