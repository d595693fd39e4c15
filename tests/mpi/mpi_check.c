/* A check of MPI over rdmaplane, every byte verified.
 *
 *   mpi_check pingpong     (2 ranks) ranks 0 and 1 send each other
 *                          messages of 8 B to 4 MiB (every power of two):
 *                          first a few, each with a pattern of its size,
 *                          iteration and direction that the receiver
 *                          checks, then, timed, as many untouched; rank 0
 *                          prints the half round trip and bandwidth of
 *                          each size from the timed ones.
 *   mpi_check collectives  (any number of ranks) MPI_Allreduce (a sum of
 *                          131072 64-bit integers), MPI_Alltoall (blocks of
 *                          4096 integers) and MPI_Bcast (1 MiB, from every
 *                          rank in turn), each result checked on every
 *                          rank.
 *
 * Rank 0 prints "mpi_check: ok" and every rank exits 0 when every check
 * held on every rank; otherwise rank 0 prints what failed and the exit
 * status is 1. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t pattern(size_t i, int size_log, int iteration, int direction) {
  return (uint8_t)(i * 131 + (size_t)size_log * 17 + (size_t)iteration * 7 +
                   (size_t)direction * 101 + (i >> 9));
}

/* Whether buf[0, len) holds the pattern; prints the first byte that does
 * not. */
static int holds(const uint8_t* buf, size_t len, int size_log, int iteration,
                 int direction, int rank) {
  for (size_t i = 0; i < len; ++i) {
    if (buf[i] != pattern(i, size_log, iteration, direction)) {
      fprintf(stderr,
              "rank %d: %zu B message, iteration %d: byte %zu is %u, not %u\n",
              rank, len, iteration, i, buf[i],
              pattern(i, size_log, iteration, direction));
      return 0;
    }
  }
  return 1;
}

/* One round trip of `len` bytes between ranks 0 and 1 of iteration `it`:
 * checked (each side fills its message with the pattern and the other
 * checks it) or not. Returns the number of bad messages seen. */
static int round_trip(uint8_t* buf, size_t len, int lg, int it, int rank,
                      int checked) {
  int bad = 0;
  if (rank == 0) {
    if (checked) {
      for (size_t i = 0; i < len; ++i) buf[i] = pattern(i, lg, it, 0);
    }
    MPI_Send(buf, (int)len, MPI_BYTE, 1, lg, MPI_COMM_WORLD);
    MPI_Recv(buf, (int)len, MPI_BYTE, 1, lg, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (checked) bad += !holds(buf, len, lg, it, 1, rank);
  } else if (rank == 1) {
    MPI_Recv(buf, (int)len, MPI_BYTE, 0, lg, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (checked) {
      bad += !holds(buf, len, lg, it, 0, rank);
      for (size_t i = 0; i < len; ++i) buf[i] = pattern(i, lg, it, 1);
    }
    MPI_Send(buf, (int)len, MPI_BYTE, 0, lg, MPI_COMM_WORLD);
  }
  return bad;
}

static int pingpong(int rank) {
  enum { kMaxLog = 22, kChecked = 5 };
  uint8_t* buf = malloc((size_t)1 << kMaxLog);
  if (buf == NULL) return 1;
  int bad = 0;
  for (int lg = 3; lg <= kMaxLog; ++lg) {
    const size_t len = (size_t)1 << lg;
    for (int it = 0; it < kChecked; ++it) {
      bad += round_trip(buf, len, lg, it, rank, 1);
    }
    const int iterations = len >= ((size_t)1 << 20) ? 20 : 200;
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int it = 0; it < iterations; ++it) {
      round_trip(buf, len, lg, kChecked + it, rank, 0);
    }
    const double took = MPI_Wtime() - start;
    if (rank == 0) {
      printf("pingpong %8zu B: %10.2f us half round trip, %9.1f MB/s\n", len,
             took / iterations / 2 * 1e6,
             2.0 * (double)len * iterations / took / 1e6);
    }
  }
  free(buf);
  return bad;
}

static int collectives(int rank, int ranks) {
  int bad = 0;
  /* Allreduce: element i of rank r is r * 1000003 + i. */
  enum { kReduce = 131072 };
  int64_t* in = malloc(sizeof(int64_t) * kReduce);
  int64_t* out = malloc(sizeof(int64_t) * kReduce);
  for (int i = 0; i < kReduce; ++i) in[i] = (int64_t)rank * 1000003 + i;
  MPI_Allreduce(in, out, kReduce, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int64_t ranks_sum = (int64_t)ranks * (ranks - 1) / 2 * 1000003;
  for (int i = 0; i < kReduce; ++i) {
    if (out[i] != ranks_sum + (int64_t)ranks * i) {
      fprintf(stderr, "rank %d: MPI_Allreduce element %d is %lld\n", rank, i,
              (long long)out[i]);
      ++bad;
      break;
    }
  }
  free(in);
  free(out);
  /* Alltoall: block j of rank r's send buffer, element k, is
   * r * 100000000 + j * 10000 + k. */
  enum { kBlock = 4096 };
  int32_t* send = malloc(sizeof(int32_t) * kBlock * (size_t)ranks);
  int32_t* recv = malloc(sizeof(int32_t) * kBlock * (size_t)ranks);
  for (int j = 0; j < ranks; ++j) {
    for (int k = 0; k < kBlock; ++k) {
      send[(size_t)j * kBlock + k] = rank * 100000000 + j * 10000 + k;
    }
  }
  MPI_Alltoall(send, kBlock, MPI_INT32_T, recv, kBlock, MPI_INT32_T,
               MPI_COMM_WORLD);
  for (int j = 0; j < ranks && !bad; ++j) {
    for (int k = 0; k < kBlock; ++k) {
      if (recv[(size_t)j * kBlock + k] != j * 100000000 + rank * 10000 + k) {
        fprintf(stderr, "rank %d: MPI_Alltoall block %d element %d is %d\n",
                rank, j, k, recv[(size_t)j * kBlock + k]);
        ++bad;
        break;
      }
    }
  }
  free(send);
  free(recv);
  /* Bcast of 1 MiB from every rank in turn. */
  const size_t len = (size_t)1 << 20;
  uint8_t* buf = malloc(len);
  for (int root = 0; root < ranks; ++root) {
    if (rank == root) {
      for (size_t i = 0; i < len; ++i) buf[i] = pattern(i, 20, root, 2);
    } else {
      memset(buf, 0, len);
    }
    MPI_Bcast(buf, (int)len, MPI_BYTE, root, MPI_COMM_WORLD);
    bad += !holds(buf, len, 20, root, 2, rank);
  }
  free(buf);
  if (rank == 0) {
    printf("collectives of %d ranks: MPI_Allreduce, MPI_Alltoall, MPI_Bcast\n",
           ranks);
  }
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int bad = 0;
  if (argc == 2 && strcmp(argv[1], "pingpong") == 0 && ranks >= 2) {
    bad = pingpong(rank);
  } else if (argc == 2 && strcmp(argv[1], "collectives") == 0) {
    bad = collectives(rank, ranks);
  } else {
    if (rank == 0) {
      fprintf(stderr, "usage: mpi_check pingpong|collectives (pingpong: at "
                      "least 2 ranks)\n");
    }
    MPI_Finalize();
    return 2;
  }
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi_check: %s\n", all == 0 ? "ok" : "a check failed");
  }
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
