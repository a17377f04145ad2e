! Unformatted sequential and direct-access files, a formatted file, and a scratch file
! deleted with close(status='delete') (libgfortran calls remove()).
program fortran_io
  implicit none
  character(len=4096) :: root
  integer :: i, u, ios
  real(8) :: a(1000), b(1000)
  logical :: ex
  call get_command_argument(1, root)
  do i = 1, 1000
    a(i) = i * 0.5d0
  end do
  open(newunit=u, file=trim(root)//'/seq.bin', form='unformatted', access='sequential', status='replace')
  write(u) a
  write(u) a(1:10)
  close(u)
  open(newunit=u, file=trim(root)//'/seq.bin', form='unformatted', access='sequential', status='old')
  read(u) b
  close(u)
  print *, 'seq ok', all(a == b)
  open(newunit=u, file=trim(root)//'/direct.bin', form='unformatted', access='direct', recl=80, status='replace')
  do i = 10, 1, -1
    write(u, rec=i) a(i*10-9:i*10)
  end do
  read(u, rec=3) b(1:10)
  close(u)
  print *, 'direct ok', all(b(1:10) == a(21:30))
  open(newunit=u, file=trim(root)//'/text.txt', status='replace')
  write(u, '(a,i0)') 'step ', 42
  close(u)
  open(newunit=u, file=trim(root)//'/scratch.tmp', form='unformatted', status='replace')
  write(u) a
  close(u, status='delete')
  inquire(file=trim(root)//'/scratch.tmp', exist=ex)
  print *, 'scratch deleted', .not. ex
  open(newunit=u, file=trim(root)//'/missing.bin', status='old', iostat=ios)
  print *, 'missing open fails', ios /= 0
end program fortran_io
