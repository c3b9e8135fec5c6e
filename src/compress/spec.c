/* spec.c — parses and prints compressor specs such as "uniform:bits=4,bucket=512". */
#include "compress/spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"

static const char* const kCodecNames[CODEC_COUNT] = {
    [CODEC_NONE] = "none",   [CODEC_FP16] = "fp16",         [CODEC_BF16] = "bf16",         [CODEC_UNIFORM] = "uniform",
    [CODEC_QSGD] = "qsgd",   [CODEC_SIGN] = "sign",         [CODEC_TERNGRAD] = "terngrad", [CODEC_TOPK] = "topk",
    [CODEC_RANDK] = "randk", [CODEC_POWERSGD] = "powersgd",
};

/* Which keys each codec accepts. A key that would be silently ignored is an error,
 * so a typo such as "topk:bits=4" is caught at create time, not after training. */
static const unsigned kCodecKeys[CODEC_COUNT] = {
    [CODEC_NONE] = 0, /* lossless: nothing to tune, no residual */
    [CODEC_FP16] = SPEC_KEY_EF,
    [CODEC_BF16] = SPEC_KEY_EF,
    [CODEC_UNIFORM] = SPEC_KEY_BITS | SPEC_KEY_BUCKET | SPEC_KEY_ROUND | SPEC_KEY_EF | SPEC_KEY_SEED,
    [CODEC_QSGD] = SPEC_KEY_BITS | SPEC_KEY_BUCKET | SPEC_KEY_EF | SPEC_KEY_SEED,
    [CODEC_SIGN] = SPEC_KEY_BUCKET | SPEC_KEY_EF,
    [CODEC_TERNGRAD] = SPEC_KEY_BUCKET | SPEC_KEY_EF | SPEC_KEY_SEED,
    [CODEC_TOPK] = SPEC_KEY_RATIO | SPEC_KEY_APPROX | SPEC_KEY_VALUES | SPEC_KEY_EF | SPEC_KEY_SEED | SPEC_KEY_ZSTD |
                   SPEC_KEY_GLOBAL,
    [CODEC_RANDK] = SPEC_KEY_RATIO | SPEC_KEY_VALUES | SPEC_KEY_EF | SPEC_KEY_SEED,
    [CODEC_POWERSGD] = SPEC_KEY_RANK | SPEC_KEY_COLS | SPEC_KEY_EF | SPEC_KEY_SEED,
};

/* Key names in canonical order (the order spec_format prints them). */
static const struct {
  const char* name;
  enum spec_key key;
} kKeys[] = {
    {"bits", SPEC_KEY_BITS},     {"bucket", SPEC_KEY_BUCKET}, {"round", SPEC_KEY_ROUND}, {"ratio", SPEC_KEY_RATIO},
    {"approx", SPEC_KEY_APPROX}, {"values", SPEC_KEY_VALUES}, {"ef", SPEC_KEY_EF},       {"seed", SPEC_KEY_SEED},
    {"zstd", SPEC_KEY_ZSTD},     {"global", SPEC_KEY_GLOBAL}, {"rank", SPEC_KEY_RANK},   {"cols", SPEC_KEY_COLS},
};
#define NUM_KEYS (sizeof kKeys / sizeof kKeys[0])

static const char* const kRoundNames[] = {"nearest", "stochastic"};
static const char* const kValuesNames[] = {"fp32", "fp16", "bf16"};

unsigned spec_codec_keys(enum codec_id codec) {
  return (unsigned)codec < CODEC_COUNT ? kCodecKeys[codec] : 0;
}

const char* spec_codec_name(enum codec_id codec) {
  return (unsigned)codec < CODEC_COUNT ? kCodecNames[codec] : "invalid";
}

static int span_equals(const char* s, size_t len, const char* word) {
  return strlen(word) == len && memcmp(s, word, len) == 0;
}

static void spec_defaults(enum codec_id codec, struct codec_spec* s) {
  unsigned keys = kCodecKeys[codec];
  memset(s, 0, sizeof *s);
  s->codec = codec;
  if (keys & SPEC_KEY_BITS) s->bits = SPEC_BITS_DEFAULT;
  if (keys & SPEC_KEY_BUCKET) s->bucket = SPEC_BUCKET_DEFAULT;
  /* Stochastic rounding keeps uniform unbiased even without error feedback. */
  if (keys & SPEC_KEY_ROUND) s->round = SPEC_ROUND_STOCHASTIC;
  if (keys & SPEC_KEY_RATIO) s->ratio = SPEC_RATIO_DEFAULT;
  if (keys & SPEC_KEY_RANK) s->rank = SPEC_RANK_DEFAULT;
  /* top-k and sign diverge without error feedback (Karimireddy et al. 2019). */
  s->ef = codec == CODEC_TOPK || codec == CODEC_SIGN || codec == CODEC_POWERSGD; /* PowerSGD's paper: EF is needed */
}

/* Decimal digits only: no sign, space or hex, so "-1" cannot wrap to 2^64-1. */
static int parse_u64(const char* v, size_t len, uint64_t* out) {
  uint64_t x = 0;
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    if (v[i] < '0' || v[i] > '9') return 0;
    unsigned d = (unsigned)(v[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return 0;
    x = x * 10 + d;
  }
  *out = x;
  return 1;
}

/* A plain decimal number ("0.01", "1e-3"); no sign, space, "inf" or "nan". */
static int parse_double(const char* v, size_t len, double* out) {
  char buf[64];
  char* end;
  if (len == 0 || len >= sizeof buf) return 0;
  if (!(v[0] == '.' || (v[0] >= '0' && v[0] <= '9'))) return 0;
  memcpy(buf, v, len);
  buf[len] = '\0';
  errno = 0;
  double d = strtod(buf, &end);
  if (end != buf + len || errno == ERANGE) return 0;
  *out = d;
  return 1;
}

static int parse_word(const char* v, size_t len, const char* const* words, int n, int* out) {
  for (int i = 0; i < n; i++) {
    if (span_equals(v, len, words[i])) {
      *out = i;
      return 1;
    }
  }
  return 0;
}

/* Stores one key's value in s. Returns gcclInvalidArgument naming key and value. */
static gcclResult_t set_key(const char* text, struct codec_spec* s, enum spec_key key, const char* name, const char* v,
                            size_t len) {
  uint64_t u = 0;
  double d = 0;
  int w = 0;
  int ok;
  switch (key) {
    case SPEC_KEY_BITS:
      ok = parse_u64(v, len, &u);
      if (ok && (u < SPEC_BITS_MIN || u > SPEC_BITS_MAX))
        return err_set(gcclInvalidArgument, "compressor spec \"%s\": bits=%.*s out of range for %s (%d..%d)", text,
                       (int)len, v, kCodecNames[s->codec], SPEC_BITS_MIN, SPEC_BITS_MAX);
      s->bits = (uint32_t)u;
      break;
    case SPEC_KEY_BUCKET:
      ok = parse_u64(v, len, &u);
      if (ok && (u < 1 || u > SPEC_BUCKET_MAX))
        return err_set(gcclInvalidArgument, "compressor spec \"%s\": bucket=%.*s out of range (1..%u)", text, (int)len,
                       v, SPEC_BUCKET_MAX);
      s->bucket = (uint32_t)u;
      break;
    case SPEC_KEY_RATIO:
      ok = parse_double(v, len, &d);
      if (ok && !(d > 0.0 && d <= 1.0))
        return err_set(gcclInvalidArgument, "compressor spec \"%s\": ratio=%.*s out of range (0, 1]", text, (int)len,
                       v);
      s->ratio = d;
      break;
    case SPEC_KEY_RANK:
      ok = parse_u64(v, len, &u);
      if (ok && (u < 1 || u > SPEC_RANK_MAX))
        return err_set(gcclInvalidArgument, "compressor spec \"%s\": rank=%.*s out of range (1..%u)", text, (int)len, v,
                       SPEC_RANK_MAX);
      s->rank = (uint32_t)u;
      break;
    case SPEC_KEY_COLS:
      ok = parse_u64(v, len, &u);
      if (ok && u > ((uint64_t)1 << 32))
        return err_set(gcclInvalidArgument, "compressor spec \"%s\": cols=%.*s out of range (0 = near-square, ..2^32)",
                       text, (int)len, v);
      s->cols = u;
      break;
    case SPEC_KEY_SEED:
      ok = parse_u64(v, len, &u);
      s->seed = u;
      break;
    case SPEC_KEY_ROUND:
      ok = parse_word(v, len, kRoundNames, 2, &w);
      s->round = (enum spec_round)w;
      break;
    case SPEC_KEY_VALUES:
      ok = parse_word(v, len, kValuesNames, 3, &w);
      s->values = (enum spec_values)w;
      break;
    default: /* approx, ef, zstd, global: flags */
      ok = span_equals(v, len, "0") || span_equals(v, len, "1");
      w = ok && v[0] == '1';
      if (key == SPEC_KEY_APPROX) s->approx = w;
      if (key == SPEC_KEY_EF) s->ef = w;
      if (key == SPEC_KEY_ZSTD) s->zstd = w;
      if (key == SPEC_KEY_GLOBAL) s->global = w;
      break;
  }
  if (!ok)
    return err_set(gcclInvalidArgument, "compressor spec \"%s\": invalid value \"%.*s\" for key %s", text, (int)len, v,
                   name);
  return gcclSuccess;
}

/* Parses one "key=value" item of [item, item_end). `seen` catches duplicates. */
static gcclResult_t parse_item(const char* text, struct codec_spec* s, const char* item, const char* item_end,
                               unsigned* seen) {
  size_t len = (size_t)(item_end - item);
  const char* eq = memchr(item, '=', len);
  if (len == 0 || eq == NULL || eq == item)
    return err_set(gcclInvalidArgument, "compressor spec \"%s\": malformed item \"%.*s\" (expected key=value)", text,
                   (int)len, item);
  size_t key_len = (size_t)(eq - item);
  for (size_t i = 0; i < NUM_KEYS; i++) {
    if (!span_equals(item, key_len, kKeys[i].name)) continue;
    enum spec_key key = kKeys[i].key;
    if (!(kCodecKeys[s->codec] & key))
      return err_set(gcclInvalidArgument, "compressor spec \"%s\": key %s does not apply to codec %s", text,
                     kKeys[i].name, kCodecNames[s->codec]);
    if (*seen & key)
      return err_set(gcclInvalidArgument, "compressor spec \"%s\": key %s given twice", text, kKeys[i].name);
    *seen |= key;
    return set_key(text, s, key, kKeys[i].name, eq + 1, (size_t)(item_end - eq - 1));
  }
  return err_set(gcclInvalidArgument, "compressor spec \"%s\": unknown key \"%.*s\" for codec %s", text, (int)key_len,
                 item, kCodecNames[s->codec]);
}

gcclResult_t spec_parse(const char* text, struct codec_spec* out) {
  if (text == NULL || out == NULL) return err_set(gcclInvalidArgument, "spec_parse: NULL argument");
  const char* colon = strchr(text, ':');
  size_t name_len = colon ? (size_t)(colon - text) : strlen(text);
  int codec = -1;
  for (int i = 0; i < CODEC_COUNT; i++)
    if (span_equals(text, name_len, kCodecNames[i])) codec = i;
  if (codec < 0)
    return err_set(gcclInvalidArgument,
                   "compressor spec \"%s\": unknown codec \"%.*s\" (expected none, fp16, bf16, uniform, qsgd, sign, "
                   "terngrad, topk or randk)",
                   text, (int)name_len, text);

  struct codec_spec s;
  spec_defaults((enum codec_id)codec, &s);
  if (colon != NULL) {
    if (colon[1] == '\0') return err_set(gcclInvalidArgument, "compressor spec \"%s\": empty key list after ':'", text);
    unsigned seen = 0;
    const char* item = colon + 1;
    for (;;) {
      const char* comma = strchr(item, ',');
      const char* item_end = comma ? comma : item + strlen(item);
      GCCL_CHECK(parse_item(text, &s, item, item_end, &seen));
      if (comma == NULL) break;
      item = comma + 1;
    }
  }
  *out = s;
  return gcclSuccess;
}

/* Appends printf output at *pos, tracking whether everything fitted. */
static int append(char* buf, size_t cap, size_t* pos, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

static int append(char* buf, size_t cap, size_t* pos, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *pos, cap - *pos, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - *pos) return 0;
  *pos += (size_t)n;
  return 1;
}

gcclResult_t spec_format(const struct codec_spec* s, char* buf, size_t cap) {
  if (s == NULL || buf == NULL || cap == 0) return err_set(gcclInvalidArgument, "spec_format: NULL argument");
  if ((unsigned)s->codec >= CODEC_COUNT)
    return err_set(gcclInvalidArgument, "spec_format: unknown codec id %d", (int)s->codec);
  unsigned keys = kCodecKeys[s->codec];
  size_t pos = 0;
  int ok = append(buf, cap, &pos, "%s", kCodecNames[s->codec]);
  char sep = ':';
  for (size_t i = 0; i < NUM_KEYS && ok; i++) {
    enum spec_key key = kKeys[i].key;
    if (!(keys & key)) continue;
    const char* name = kKeys[i].name;
    switch (key) {
      case SPEC_KEY_BITS:
        ok = append(buf, cap, &pos, "%c%s=%u", sep, name, (unsigned)s->bits);
        break;
      case SPEC_KEY_BUCKET:
        ok = append(buf, cap, &pos, "%c%s=%u", sep, name, (unsigned)s->bucket);
        break;
      case SPEC_KEY_ROUND:
        ok = append(buf, cap, &pos, "%c%s=%s", sep, name, kRoundNames[s->round != 0]);
        break;
      /* 17 significant digits always read back as the same double. */
      case SPEC_KEY_RATIO:
        ok = append(buf, cap, &pos, "%c%s=%.17g", sep, name, s->ratio);
        break;
      case SPEC_KEY_VALUES:
        ok = append(buf, cap, &pos, "%c%s=%s", sep, name, kValuesNames[(unsigned)s->values <= 2 ? s->values : 0]);
        break;
      case SPEC_KEY_RANK:
        ok = append(buf, cap, &pos, "%c%s=%u", sep, name, (unsigned)s->rank);
        break;
      case SPEC_KEY_COLS:
        ok = append(buf, cap, &pos, "%c%s=%llu", sep, name, (unsigned long long)s->cols);
        break;
      case SPEC_KEY_SEED:
        ok = append(buf, cap, &pos, "%c%s=%llu", sep, name, (unsigned long long)s->seed);
        break;
      case SPEC_KEY_APPROX:
        ok = append(buf, cap, &pos, "%c%s=%d", sep, name, s->approx != 0);
        break;
      case SPEC_KEY_EF:
        ok = append(buf, cap, &pos, "%c%s=%d", sep, name, s->ef != 0);
        break;
      case SPEC_KEY_ZSTD:
        ok = append(buf, cap, &pos, "%c%s=%d", sep, name, s->zstd != 0);
        break;
      case SPEC_KEY_GLOBAL:
        if (!s->global) continue; /* the default is not printed: sep stays */
        ok = append(buf, cap, &pos, "%c%s=1", sep, name);
        break;
    }
    sep = ',';
  }
  if (!ok) return err_set(gcclInvalidArgument, "spec_format: buffer of %zu bytes too small", cap);
  return gcclSuccess;
}
