// The ring of mpi_ring.c in C++, built unchanged with either MPI's C++
// compiler (mpicxx.mpich or mpicxx.openmpi) and run as a native Zorilla
// job: each rank passes a token round the ring and all ranks sum their
// ranks; each prints the same line as the C program.
#include <mpi.h>

#include <iostream>
#include <numeric>
#include <sstream>
#include <vector>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int token = 0;
    if (size > 1) {
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += 1;
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }
    // Every rank's number, gathered everywhere, summed with the library.
    std::vector<int> ranks(size);
    MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, MPI_COMM_WORLD);
    const int sum = std::accumulate(ranks.begin(), ranks.end(), 0);
    std::ostringstream line;
    line << "rank " << rank << " of " << size << ": token " << token << ", sum of ranks " << sum
         << "\n";
    std::cout << line.str() << std::flush;
    MPI_Finalize();
    return 0;
}
