/* The Open MPI ping-pong of bench/compare: ranks 0 and 1 send each other
 * 8-byte messages, then 1 MiB messages, with MPI_Send and MPI_Recv in turn.
 *
 *   mpi_pingpong LAT_ITERATIONS BW_ITERATIONS
 *
 * Each size starts with untimed round trips (a tenth of the timed ones, at
 * least 100 of 8 bytes and 5 of 1 MiB) whose messages carry a pattern of
 * their size, iteration and direction that the receiver checks; then come
 * the timed round trips, as many as asked, their messages untouched: each
 * 8-byte round trip timed on its own (MPI_Wtime before and after), the
 * 1 MiB ones together. Rank 0 prints one line:
 *
 *   mpi_pingpong: lat_8b_typical_us=T lat_8b_average_us=A lat_iterations=N
 *       bw_1m_gbps=G bw_iterations=M
 *
 * (on one line). T is the median of the 8-byte round trips and A their
 * mean, each halved (half a round trip, as perftest's t_typical and
 * t_avg); G is the bytes of the 1 MiB messages, both ways, over their time,
 * in 1e9 bytes a second (a round trip moves the message there and back).
 * Exit status 0; 1 when a checked message was wrong (named on stderr) or
 * memory ran out; 2 on a usage error. bench/compare_run.sh builds it with
 * mpicc and runs it under mpirun, over rdmaplane and over TCP. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSmall = 8, kLarge = 1 << 20 };

static uint8_t pattern(size_t i, size_t len, long iteration, int direction) {
  return (uint8_t)(i * 131 + len * 17 + (size_t)iteration * 7 +
                   (size_t)direction * 101 + (i >> 9));
}

/* One round trip of `len` bytes between ranks 0 and 1: checked (each side
 * fills its message with the pattern and the other checks every byte) or
 * not. Returns the number of bad messages seen. */
static int round_trip(uint8_t* buf, size_t len, long it, int rank,
                      int checked) {
  int bad = 0;
  const int peer = 1 - rank;
  for (int leg = 0; leg < 2; ++leg) {
    /* Leg 0: rank 0 sends; leg 1: rank 1 answers. */
    if (rank == leg) {
      if (checked) {
        for (size_t i = 0; i < len; ++i) buf[i] = pattern(i, len, it, leg);
      }
      MPI_Send(buf, (int)len, MPI_BYTE, peer, leg, MPI_COMM_WORLD);
    } else {
      MPI_Recv(buf, (int)len, MPI_BYTE, peer, leg, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      if (!checked) continue;
      for (size_t i = 0; i < len; ++i) {
        if (buf[i] != pattern(i, len, it, leg)) {
          fprintf(stderr,
                  "mpi_pingpong: rank %d: %zu B message, iteration %ld: byte "
                  "%zu is %u, not %u\n",
                  rank, len, it, i, buf[i], pattern(i, len, it, leg));
          ++bad;
          break;
        }
      }
    }
  }
  return bad;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static long warmup(long iterations, long least) {
  return iterations / 10 > least ? iterations / 10 : least;
}

static long parse_count(const char* text) {
  char* end = NULL;
  const long v = strtol(text, &end, 10);
  return (end != text && *end == '\0' && v > 0 && v <= 100000000) ? v : -1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const long lat_iterations = argc == 3 ? parse_count(argv[1]) : -1;
  const long bw_iterations = argc == 3 ? parse_count(argv[2]) : -1;
  if (ranks != 2 || lat_iterations < 0 || bw_iterations < 0) {
    if (rank == 0) {
      fprintf(stderr,
              "usage: mpi_pingpong LAT_ITERATIONS BW_ITERATIONS (2 ranks; "
              "counts of 1 to 100000000)\n");
    }
    MPI_Finalize();
    return 2;
  }
  uint8_t* buf = malloc(kLarge);
  double* times = malloc(sizeof(double) * (size_t)lat_iterations);
  int failed = buf == NULL || times == NULL;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: out of memory\n");
    MPI_Finalize();
    return 1;
  }
  memset(buf, 0, kLarge);
  int bad = 0;

  long it = 0;
  for (const long end = warmup(lat_iterations, 100); it < end; ++it) {
    bad += round_trip(buf, kSmall, it, rank, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < lat_iterations; ++i) {
    const double start = MPI_Wtime();
    round_trip(buf, kSmall, it + i, rank, 0);
    times[i] = MPI_Wtime() - start;
  }
  double sum = 0;
  for (long i = 0; i < lat_iterations; ++i) sum += times[i];
  qsort(times, (size_t)lat_iterations, sizeof(double), by_value);
  const double typical = times[lat_iterations / 2];

  for (long i = 0, end = warmup(bw_iterations, 5); i < end; ++i) {
    bad += round_trip(buf, kLarge, i, rank, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (long i = 0; i < bw_iterations; ++i) {
    round_trip(buf, kLarge, i, rank, 0);
  }
  const double took = MPI_Wtime() - start;

  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all != 0) {
      printf("mpi_pingpong: %d checked message(s) were wrong\n", all);
    } else {
      printf("mpi_pingpong: lat_8b_typical_us=%.3f lat_8b_average_us=%.3f "
             "lat_iterations=%ld bw_1m_gbps=%.4f bw_iterations=%ld\n",
             typical / 2 * 1e6, sum / (double)lat_iterations / 2 * 1e6,
             lat_iterations, 2.0 * kLarge * (double)bw_iterations / took / 1e9,
             bw_iterations);
    }
  }
  free(times);
  free(buf);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
