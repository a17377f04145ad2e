! An SCR application in Fortran, written from SCR's API documentation (the scrf
! subroutines and scrf.h constants). Run with 4 ranks by tests/scr-veloc/run.sh:
!   scr_ftest write     two checkpoints "fstep.1", "fstep.2" of one file per rank
!   scr_ftest restart   restart from "fstep.2" and check every value
program scr_ftest
  use mpi
  implicit none
  include 'scrf.h'
  integer :: ierr, rank, nranks, flag, step, i, u, fails, total
  character(len=SCR_MAX_FILENAME) :: fname, path, dname
  character(len=16) :: mode
  integer, parameter :: n = 20000
  double precision :: a(n)

  fails = 0
  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, mode)
  call SCR_INIT(ierr)
  if (ierr /= SCR_SUCCESS) fails = fails + 1
  write(fname, '(A,I0,A)') 'fckpt/rank_', rank, '.bin'
  if (trim(mode) == 'write') then
    do step = 1, 2
      write(dname, '(A,I0)') 'fstep.', step
      call SCR_START_OUTPUT(dname, SCR_FLAG_CHECKPOINT, ierr)
      if (ierr /= SCR_SUCCESS) fails = fails + 1
      call SCR_ROUTE_FILE(fname, path, ierr)
      if (ierr /= SCR_SUCCESS) fails = fails + 1
      do i = 1, n
        a(i) = rank * 1000.0d0 + step * 10.0d0 + i
      end do
      open(newunit=u, file=trim(path), form='unformatted', access='stream', status='replace')
      write(u) a
      close(u)
      call SCR_COMPLETE_OUTPUT(1, ierr)
      if (ierr /= SCR_SUCCESS) fails = fails + 1
    end do
    ! Completing again without a start is an error.
    call SCR_COMPLETE_OUTPUT(1, ierr)
    if (ierr == SCR_SUCCESS) fails = fails + 1
  else
    call SCR_HAVE_RESTART(flag, dname, ierr)
    if (ierr /= SCR_SUCCESS .or. flag /= 1 .or. trim(dname) /= 'fstep.2') then
      print *, 'rank', rank, 'SCR_HAVE_RESTART', ierr, flag, trim(dname)
      fails = fails + 1
    end if
    call SCR_START_RESTART(dname, ierr)
    if (ierr /= SCR_SUCCESS .or. trim(dname) /= 'fstep.2') fails = fails + 1
    call SCR_ROUTE_FILE(fname, path, ierr)
    if (ierr /= SCR_SUCCESS) fails = fails + 1
    a = 0
    open(newunit=u, file=trim(path), form='unformatted', access='stream', status='old')
    read(u) a
    close(u)
    do i = 1, n
      if (a(i) /= rank * 1000.0d0 + 20.0d0 + i) then
        fails = fails + 1
        exit
      end if
    end do
    call SCR_COMPLETE_RESTART(1, ierr)
    if (ierr /= SCR_SUCCESS) fails = fails + 1
  end if
  call SCR_NEED_CHECKPOINT(flag, ierr)
  if (ierr /= SCR_SUCCESS) fails = fails + 1
  call SCR_FINALIZE(ierr)
  if (ierr /= SCR_SUCCESS) fails = fails + 1
  call MPI_ALLREDUCE(fails, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(A,A,A,I0,A)', 'scr_ftest ', trim(mode), ': ', total, ' failed checks'
  call MPI_FINALIZE(ierr)
  if (total /= 0) stop 1
end program scr_ftest
