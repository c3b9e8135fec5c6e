/* gccl-project.c — what gccl's allreduce would take on clusters this machine does
 * not have: the cost model that GCCL_COMPRESS=auto: decides with
 * (src/collectives/cost_model.h), fed with the codec rates measured here.
 *
 *   gccl-project [-s SIZE] [-g GPUS_PER_NODE] [-n "NODES..."] [-l "GBPS..."] [--nic-per-gpu]
 *                [--link-us US] [--intra-gbps G] [--intra-us US] [--overlap] [-c "SPECS..."]
 *   gccl-project --validate -s SIZE -p RANKS -L RANKS_PER_NODE -l GBPS [--link-us US] [--cpu-share S]
 *                [--overlap] [-c ...]
 *
 * Projection (default: 100 MiB of fp32, 8 GPUs per node, 8 to 1024 nodes, 10, 25,
 * 100 and 400 Gbit/s per node, 5 us between nodes, 1200 Gbit/s and 2 us within
 * one; a node's link is shared by its GPUs, or with --nic-per-gpu each GPU has
 * one of that rate): per cell, gccl's best dense algorithm and each codec's schedule as the
 * tuner picks it (hierarchical across nodes), the best of all, and beside them
 * three published formulas over the nodes' links, with n the tensor's bytes, N
 * nodes, B a node's link rate and a the latency between nodes:
 *   NCCL ring   2 (N-1) a + 2 (N-1)/N n / B
 *   NCCL tree   2 log2(N) a + 2 n / B  (double binary tree: full bandwidth, log latency)
 *   Ok-Topk     2 log2(N) a + 6 k (N-1)/N e / B  (Li & Hoefler, PPoPP 2022: its sparse
 *               allreduce moves 6k(P-1)/P entries; k the top-k entries of the tensor
 *               at the first top-k spec's ratio, e = 8 bytes of value and index)
 * The node-level formulas leave out the work inside a node, which gccl's rows include.
 *
 * --validate prints the model's time of each row for one configuration, to set
 * beside the link model's and the test bed's measured times (BENCHMARKS.md);
 * --cpu-share S scales the compute rates for ranks that had S of a core each
 * (the test bed runs 4 processes on 2 cores: 0.5; the link model's clock counts
 * each thread's own CPU time: 1). --overlap models a transport that moves a
 * message while its sender computes, as the link model does (cost_model.h); MPI
 * over TCP, the test bed, does not.
 * Times are in milliseconds. The codec and reduction rates are this CPU's, one
 * thread, measured on a tensor of the projected size (up to MEASURE_MAX_COUNT
 * elements): the library's own 1 Mi-element measurement stays in the caches,
 * which made random-k's error feedback look 1.6x faster than on 100 MiB. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/cost_model.h"
#include "collectives/tuner.h"
#include "compress/spec.h"

#define MAX_LIST 16
#define MEASURE_MAX_COUNT ((size_t)32 << 20)
#define MAX_SPECS 12

struct options {
  double bytes;
  int gpus;
  int nodes[MAX_LIST], nnodes;
  double gbps[MAX_LIST];
  int ngbps;
  double link_us, intra_gbps, intra_us;
  const char* specs[MAX_SPECS];
  int nspecs;
  int validate, ranks, per_node;
  int nic_per_gpu;          /* each GPU has a link of the rate given; default: one per node, shared */
  int overlap;              /* sends move while the sender computes (cost_model.sends_overlap_compute) */
  double reduce_s_per_byte; /* measured (measure) */
  double cpu_share;         /* --validate: the share of a core each rank had (4 ranks on 2 cores: 0.5) */
};

/* "100M", "1G", "4096": bytes (powers of 1024). */
static double size_of(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  const char* units = "KMG";
  const char* u = *end ? strchr(units, *end & ~0x20) : NULL;
  return u ? v * pow(1024.0, (double)(u - units + 1)) : v;
}

/* Space-separated numbers into out; returns how many. */
static int parse_list(const char* s, double* out) {
  int n = 0;
  char* copy = strdup(s);
  for (char* tok = strtok(copy, " ,"); tok && n < MAX_LIST; tok = strtok(NULL, " ,")) out[n++] = atof(tok);
  free(copy);
  return n;
}

static void usage(void) {
  fprintf(stderr,
          "usage: gccl-project [-s SIZE] [-g GPUS_PER_NODE] [-n \"NODES...\"] [-l \"GBPS...\"] [--nic-per-gpu]\n"
          "                    [--link-us US]"
          " [--intra-gbps G] [--intra-us US] [--overlap] [-c \"SPECS...\"]\n"
          "       gccl-project --validate -p RANKS -L RANKS_PER_NODE -l GBPS [-s SIZE] [--link-us US] [--cpu-share S]"
          " [--overlap] [-c ...]\n");
  exit(2);
}

static void parse(int argc, char** argv, struct options* o) {
  static const char* default_specs[] = {
      "fp16", "uniform:bits=8", "uniform:bits=4", "sign", "topk:ratio=0.01", "randk:ratio=0.01", "powersgd:rank=4"};
  *o = (struct options){
      .bytes = 100.0 * 1024 * 1024, .gpus = 8, .link_us = 5, .intra_gbps = 1200, .intra_us = 2, .cpu_share = 1};
  int n_default = 0;
  for (int k = 8; k <= 1024; k *= 2) o->nodes[n_default++] = k;
  o->nnodes = n_default;
  double g[] = {10, 25, 100, 400};
  memcpy(o->gbps, g, sizeof g);
  o->ngbps = 4;
  for (size_t i = 0; i < sizeof default_specs / sizeof *default_specs; i++) o->specs[o->nspecs++] = default_specs[i];
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--validate")) {
      o->validate = 1;
      continue;
    }
    if (!strcmp(a, "--nic-per-gpu")) {
      o->nic_per_gpu = 1;
      continue;
    }
    if (!strcmp(a, "--overlap")) {
      o->overlap = 1;
      continue;
    }
    if (!v) usage();
    i++;
    if (!strcmp(a, "-s")) {
      o->bytes = size_of(v);
    } else if (!strcmp(a, "-g")) {
      o->gpus = atoi(v);
    } else if (!strcmp(a, "-n")) {
      double x[MAX_LIST];
      o->nnodes = parse_list(v, x);
      for (int k = 0; k < o->nnodes; k++) o->nodes[k] = (int)x[k];
    } else if (!strcmp(a, "-l")) {
      o->ngbps = parse_list(v, o->gbps);
    } else if (!strcmp(a, "--link-us")) {
      o->link_us = atof(v);
    } else if (!strcmp(a, "--intra-gbps")) {
      o->intra_gbps = atof(v);
    } else if (!strcmp(a, "--intra-us")) {
      o->intra_us = atof(v);
    } else if (!strcmp(a, "-c")) {
      o->nspecs = 0;
      char* copy = strdup(v); /* kept: specs point into it */
      for (char* tok = strtok(copy, " "); tok && o->nspecs < MAX_SPECS; tok = strtok(NULL, " "))
        o->specs[o->nspecs++] = tok;
    } else if (!strcmp(a, "--cpu-share")) {
      o->cpu_share = atof(v);
    } else if (!strcmp(a, "-p")) {
      o->ranks = atoi(v);
    } else if (!strcmp(a, "-L")) {
      o->per_node = atoi(v);
    } else {
      usage();
    }
  }
  if (o->bytes < 4 || o->gpus < 1 || o->nnodes < 1 || o->ngbps < 1 || o->nspecs < 1) usage();
  if (o->validate && (o->ranks < 1 || o->per_node < 1 || !(o->cpu_share > 0 && o->cpu_share <= 1))) usage();
}

/* A codec's spec and measured rates. */
struct codec {
  const char* text;
  struct codec_spec spec;
  struct cost_codec rates;
};

/* The codecs' and the reduction's rates on this CPU, at the projected size. */
static double measure(const struct options* o, struct codec* codecs) {
  size_t count = (size_t)(o->bytes / 4);
  if (count > MEASURE_MAX_COUNT) count = MEASURE_MAX_COUNT;
  for (int i = 0; i < o->nspecs; i++) {
    codecs[i].text = o->specs[i];
    char canonical[SPEC_FORMAT_MAX];
    if (spec_parse(o->specs[i], &codecs[i].spec) != gcclSuccess ||
        spec_format(&codecs[i].spec, canonical, sizeof canonical) != gcclSuccess ||
        cost_codec_measure_at(canonical, count, &codecs[i].rates) != gcclSuccess) {
      fprintf(stderr, "gccl-project: cannot measure codec %s\n", o->specs[i]);
      exit(1);
    }
  }
  return cost_reduce_rate_at(count);
}

/* The model's links: its inter-node β is per rank, so a node's link shared by
 * `sharing` ranks gives each of them 1/sharing of it. */
static struct cost_model model_of(const struct options* o, int ranks, int per_node, double gbps, int sharing) {
  struct cost_model m;
  cost_model_links(&m, ranks, per_node);
  m.reduce_s_per_byte = o->reduce_s_per_byte;
  m.sends_overlap_compute = o->overlap;
  m.inter.beta = 8.0 * sharing / (gbps * 1e9);
  m.inter.alpha = o->link_us * 1e-6;
  m.intra.beta = 8.0 / (o->intra_gbps * 1e9);
  m.intra.alpha = o->intra_us * 1e-6;
  return m;
}

/* The codec's allreduce as the tuner schedules it (hierarchical across nodes). */
static double codec_time(const struct cost_model* m, const struct codec* c, size_t count) {
  enum coll_algo algo = tuner_choose_compressed(COLL_ALLREDUCE, &c->spec, count, m->nranks, m->local_size, ALGO_AUTO);
  return cost_allreduce(m, algo, count, sizeof(float), &c->spec, &c->rates, 1);
}

static double topk_ratio(const struct options* o, const struct codec* codecs) {
  for (int i = 0; i < o->nspecs; i++)
    if (codecs[i].spec.codec == CODEC_TOPK) return codecs[i].spec.ratio;
  return 0.01;
}

static void validate(const struct options* o, struct codec* codecs) {
  size_t count = (size_t)(o->bytes / 4);
  struct cost_model m = model_of(o, o->ranks, o->per_node, o->gbps[0], 1);
  /* A rank with a share of a core computes that much slower. */
  m.reduce_s_per_byte /= o->cpu_share;
  for (int i = 0; i < o->nspecs; i++) {
    codecs[i].rates.encode_s_per_elem /= o->cpu_share;
    codecs[i].rates.decode_s_per_elem /= o->cpu_share;
  }
  printf(
      "# gccl-project --validate: %.0f bytes of fp32, %d ranks, %d per node, %.3g Gbit/s and %.3g us between nodes,"
      " %.2g of a core per rank, sends %s the sender's compute; model ms\n",
      o->bytes, o->ranks, o->per_node, o->gbps[0], o->link_us, o->cpu_share, o->overlap ? "overlap" : "after");
  static const enum coll_algo dense[] = {ALGO_RING, ALGO_RHD, ALGO_TREE, ALGO_HIER};
  for (size_t i = 0; i < 4; i++) {
    double t = cost_allreduce(&m, dense[i], count, sizeof(float), NULL, NULL, 0);
    if (t >= 0) printf("%-22s %-12s %12.2f\n", "none", algo_name(dense[i]), t * 1e3);
  }
  for (int i = 0; i < o->nspecs; i++) {
    enum coll_algo algo =
        tuner_choose_compressed(COLL_ALLREDUCE, &codecs[i].spec, count, m.nranks, m.local_size, ALGO_AUTO);
    printf("%-22s %-12s %12.2f\n", codecs[i].text, algo_name(algo), codec_time(&m, &codecs[i], count) * 1e3);
  }
}

static void project(const struct options* o, const struct codec* codecs) {
  size_t count = (size_t)(o->bytes / 4);
  double k = topk_ratio(o, codecs) * (double)count;
  printf(
      "# gccl-project: allreduce of %.0f bytes of fp32, %d GPUs per node, %s; between nodes %.3g us, within "
      "%.4g Gbit/s and %.3g us; sends %s the sender's compute; model ms (codec rates: this CPU, one thread)\n",
      o->bytes, o->gpus, o->nic_per_gpu ? "a link of the rate given per GPU" : "one link of the rate given per node",
      o->link_us, o->intra_gbps, o->intra_us, o->overlap ? "overlap" : "after");
  printf("%6s %6s %7s | %10s %-5s", "nodes", "ranks", "Gbit/s", "dense", "algo");
  for (int i = 0; i < o->nspecs; i++) printf(" %16.16s", codecs[i].text);
  printf(" | %-16s %8s | %10s %10s %10s\n", "best", "x dense", "NCCL ring", "NCCL tree", "Ok-Topk");
  for (int g = 0; g < o->ngbps; g++)
    for (int nn = 0; nn < o->nnodes; nn++) {
      int nodes = o->nodes[nn], ranks = nodes * o->gpus;
      struct cost_model m = model_of(o, ranks, o->gpus, o->gbps[g], o->nic_per_gpu ? 1 : o->gpus);
      enum coll_algo dalgo;
      double dense = cost_best_dense_allreduce(&m, count, sizeof(float), &dalgo), best = dense;
      const char* best_name = "dense";
      printf("%6d %6d %7.4g | %10.2f %-5s", nodes, ranks, o->gbps[g], dense * 1e3, algo_name(dalgo));
      for (int i = 0; i < o->nspecs; i++) {
        double t = codec_time(&m, &codecs[i], count);
        printf(" %16.2f", t * 1e3);
        if (t >= 0 && t < best) best = t, best_name = codecs[i].text;
      }
      double a = o->link_us * 1e-6, B = o->gbps[g] * 1e9 / 8, N = nodes, lg = log2(N);
      double ring = 2 * (N - 1) * a + 2 * (N - 1) / N * o->bytes / B;
      double tree = 2 * lg * a + 2 * o->bytes / B;
      double oktopk = 2 * lg * a + 6 * k * (N - 1) / N * 8 / B;
      printf(" | %-16.16s %8.2f | %10.2f %10.2f %10.2f\n", best_name, dense / best, ring * 1e3, tree * 1e3,
             oktopk * 1e3);
    }
}

int main(int argc, char** argv) {
  struct options o;
  parse(argc, argv, &o);
  struct codec codecs[MAX_SPECS];
  o.reduce_s_per_byte = measure(&o, codecs);
  if (o.validate)
    validate(&o, codecs);
  else
    project(&o, codecs);
  return 0;
}
