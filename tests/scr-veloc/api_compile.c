/*
 * Uses every function and constant of scr.h and veloc.h, compiled with
 * -Wall -Wextra -Werror and linked against libscr.so and libveloc-client.so. run.sh
 * runs it with LD_BIND_NOW=1, so that the dynamic linker resolves every symbol at
 * start: a function declared in a header but missing from a library fails here. The
 * calls themselves only run with an argument (they need MPI); without, it checks the
 * constants and exits.
 */
#include <mpi.h>
#include <scr.h>
#include <veloc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int scr_all(void) {
    char file[SCR_MAX_FILENAME], name[SCR_MAX_FILENAME];
    int flag = 0, rc = 0;
    free((void *)SCR_Config("SCR_FLUSH=0"));
    free((void *)SCR_Configf("SCR_CACHE_SIZE=%d", 2));
    rc |= SCR_Init();
    rc |= SCR_Need_checkpoint(&flag);
    rc |= SCR_Start_output("a", SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT);
    rc |= SCR_Route_file("x", file);
    rc |= SCR_Complete_output(1);
    rc |= SCR_Start_checkpoint();
    rc |= SCR_Complete_checkpoint(1);
    rc |= SCR_Have_restart(&flag, name);
    rc |= SCR_Start_restart(name);
    rc |= SCR_Complete_restart(1);
    rc |= SCR_Current("a");
    rc |= SCR_Drop("a");
    rc |= SCR_Delete("a");
    rc |= SCR_Should_exit(&flag);
    printf("%s\n", SCR_Get_version());
    rc |= SCR_Finalize();
    return rc;
}

static int veloc_all(void) {
    char routed[VELOC_MAX_NAME];
    int ids[1] = {0}, x = 0, rc = 0;
    rc |= VELOC_Init(MPI_COMM_WORLD, "veloc.cfg");
    rc |= VELOC_Mem_protect(0, &x, 1, sizeof x);
    rc |= VELOC_Region_protect(1, &x, 1, sizeof x, "r");
    rc |= VELOC_Checkpoint_begin("c", 1);
    rc |= VELOC_Checkpoint_selective(VELOC_CKPT_SOME, ids, 1);
    rc |= VELOC_Checkpoint_mem();
    rc |= VELOC_Route_file("f", routed);
    rc |= VELOC_Checkpoint_end(1);
    rc |= VELOC_Checkpoint_wait();
    rc |= VELOC_Checkpoint_finished();
    rc |= VELOC_Checkpoint("c", 2);
    rc |= VELOC_Restart_test("c", 0);
    rc |= VELOC_Restart_begin("c", 2);
    rc |= VELOC_Recover_size(0);
    rc |= VELOC_Recover_selective(VELOC_RECOVER_REST, ids, 1);
    rc |= VELOC_Recover_mem();
    rc |= VELOC_Restart_end(1);
    rc |= VELOC_Restart("c", 2);
    rc |= VELOC_Region_unprotect(1, "r");
    rc |= VELOC_Region_clear("r");
    rc |= VELOC_Mem_unprotect(0);
    rc |= VELOC_Mem_clear();
    rc |= VELOC_Cleanup("c");
    rc |= VELOC_Finalize(0);
    rc |= VELOC_Init_single(7, "veloc.cfg");
    rc |= VELOC_Finalize(1);
    return rc;
}

int main(int argc, char **argv) {
    int consts_ok = SCR_SUCCESS == 0 && SCR_MAX_FILENAME == 1024 && SCR_FLAG_NONE == 0 &&
                    SCR_FLAG_CHECKPOINT == 1 && SCR_FLAG_OUTPUT == 2 && strcmp(SCR_VERSION, "v3.1.0") == 0 &&
                    VELOC_SUCCESS == 0 && VELOC_FAILURE == -1 && VELOC_MAX_NAME == 1024 &&
                    VELOC_RECOVER_ALL == 0 && VELOC_RECOVER_SOME == 1 && VELOC_RECOVER_REST == 2 &&
                    VELOC_CKPT_ALL == 0 && VELOC_CKPT_SOME == 1 && VELOC_CKPT_REST == 2;
    if (!consts_ok) {
        fprintf(stderr, "api_compile: a constant differs from the original headers\n");
        return 1;
    }
    if (argc > 1) {
        MPI_Init(&argc, &argv);
        int rc = strcmp(argv[1], "scr") == 0 ? scr_all() : veloc_all();
        MPI_Finalize();
        return rc != 0;
    }
    return 0;
}
