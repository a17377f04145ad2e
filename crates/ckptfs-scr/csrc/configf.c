/*
 * SCR_Configf(format, ...): C variadic functions cannot be defined in stable Rust, so
 * this one formats in C and hands the string to SCR_Config (Rust). Its symbol is
 * exported from libscr.so by the linker flag in build.rs.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *SCR_Config(const char *config);

__attribute__((visibility("default"))) const char *SCR_Configf(const char *format, ...) {
    if (format == NULL) return SCR_Config(NULL);
    va_list ap;
    va_start(ap, format);
    char *s = NULL;
    int n = vasprintf(&s, format, ap);
    va_end(ap);
    if (n < 0 || s == NULL) return NULL;
    const char *r = SCR_Config(s);
    free(s);
    return r;
}
