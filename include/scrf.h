! scrf.h: constants of the SCR Fortran interface, as implemented by ckptfs's
! libscr.so. Include it in Fortran code calling SCR_INIT(IERROR), SCR_ROUTE_FILE(NAME,
! FILE, IERROR), ... (docs/scr-veloc.md).

      INTEGER SCR_SUCCESS
      PARAMETER (SCR_SUCCESS=0)

      INTEGER SCR_FAILURE
      PARAMETER (SCR_FAILURE=1)

      INTEGER SCR_MAX_FILENAME
      PARAMETER (SCR_MAX_FILENAME=1024)

      INTEGER SCR_FLAG_NONE
      PARAMETER (SCR_FLAG_NONE=0)

      INTEGER SCR_FLAG_CHECKPOINT
      PARAMETER (SCR_FLAG_CHECKPOINT=1)

      INTEGER SCR_FLAG_OUTPUT
      PARAMETER (SCR_FLAG_OUTPUT=2)
