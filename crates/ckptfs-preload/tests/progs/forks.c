/* fork: the child shares open descriptions (offset) and opens its own files. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char p[4096];
    snprintf(p, sizeof p, "%s/shared.txt", argv[1]);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    write(fd, "parent1\n", 8);
    FILE *f;
    for (int k = 0; k < 3; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            char line[64];
            int n = snprintf(line, sizeof line, "child%d\n", k);
            write(fd, line, n);
            char q[4096];
            snprintf(q, sizeof q, "%s/child%d.txt", argv[1], k);
            f = fopen(q, "w");
            fprintf(f, "written by child %d\n", k);
            fclose(f);
            if (k == 2) _exit(0); /* _exit without closing fd */
            return 0;
        }
        int st;
        waitpid(pid, &st, 0);
    }
    write(fd, "parent2\n", 8);
    printf("offset=%ld\n", (long)lseek(fd, 0, SEEK_CUR));
    close(fd);
    fd = open(p, O_RDONLY);
    char buf[256] = {0};
    read(fd, buf, sizeof buf - 1);
    printf("%s", buf);
    return 0;
}
