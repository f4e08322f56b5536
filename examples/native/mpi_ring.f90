! The ring of mpi_ring.c in Fortran, built unchanged with either MPI's
! compiler (mpif90.mpich or mpif90.openmpi) and run as a native Zorilla
! job: each rank passes a token round the ring and all ranks sum their
! ranks; each prints the same line as the C program.
program mpi_ring
  use mpi
  implicit none
  integer :: rank, nranks, token, total, ierr
  integer :: status(MPI_STATUS_SIZE)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  token = 0
  if (nranks > 1) then
    if (rank == 0) then
      token = 1
      call MPI_Send(token, 1, MPI_INTEGER, 1, 0, MPI_COMM_WORLD, ierr)
      call MPI_Recv(token, 1, MPI_INTEGER, nranks - 1, 0, MPI_COMM_WORLD, status, ierr)
    else
      call MPI_Recv(token, 1, MPI_INTEGER, rank - 1, 0, MPI_COMM_WORLD, status, ierr)
      token = token + 1
      call MPI_Send(token, 1, MPI_INTEGER, mod(rank + 1, nranks), 0, MPI_COMM_WORLD, ierr)
    end if
  end if
  call MPI_Allreduce(rank, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  write (*, '(A,I0,A,I0,A,I0,A,I0)') 'rank ', rank, ' of ', nranks, ': token ', token, &
    ', sum of ranks ', total
  call MPI_Finalize(ierr)
end program mpi_ring
