/* A runtime written in C: links the installed libkvtool, publishes an artifact, queries it, and
 * exercises the error path. Usage: consumer ARTIFACT Q_FILE(head_dim f32) POSITION */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtool/kvtool_c.h>

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: consumer ARTIFACT Q.f32 HEAD_DIM POSITION\n");
    return 2;
  }
  int d = atoi(argv[3]);
  long long pos = atoll(argv[4]);
  float q[1024];
  FILE* f = fopen(argv[2], "rb");
  if (!f || d <= 0 || d > 1024 || fread(q, sizeof(float), (size_t)d, f) != (size_t)d) return 3;
  fclose(f);
  kvtool_pool* pool = NULL;
  if (kvtool_pool_new((int64_t)1 << 30, 0, KVTOOL_DEVICE_CPU, &pool) != KVTOOL_OK) return 4;
  int64_t gen = 0;
  int rc = kvtool_pool_publish(pool, "doc", argv[1], NULL, &gen);
  if (rc != KVTOOL_OK) {
    fprintf(stderr, "publish: %s: %s\n", kvtool_last_reason(), kvtool_last_error());
    return 5;
  }
  kvtool_lease* lease = NULL;
  if (kvtool_pool_acquire(pool, "doc", &lease) != KVTOOL_OK) return 6;
  int64_t ids[4096], n = 0;
  rc = kvtool_lease_query(lease, 0, 0, q, pos, "budget=0.1", ids, 4096, &n);
  if (rc != KVTOOL_OK) {
    fprintf(stderr, "query: %s: %s\n", kvtool_last_reason(), kvtool_last_error());
    return 7;
  }
  printf("version %s generation %lld candidates", kvtool_version(), (long long)kvtool_lease_generation(lease));
  for (int64_t i = 0; i < n && i < 4096; ++i) printf(" %lld", (long long)ids[i]);
  printf("\n");
  /* The error path: a key with nothing published. */
  kvtool_lease* none = NULL;
  rc = kvtool_pool_acquire(pool, "missing", &none);
  printf("missing key: status %d reason %s\n", rc, kvtool_last_reason());
  kvtool_lease_release(lease);
  int64_t used = -1;
  kvtool_pool_retire(pool, "doc", 1);
  kvtool_pool_usage(pool, &used, NULL);
  printf("host bytes after retire %lld\n", (long long)used);
  kvtool_pool_free(pool);
  return 0;
}
