/* Guest instruction counter for qemu-user 7.2 (plugin API version 1), for `bench arm`.
 *
 * Debian's qemu-user accepts -plugin but ships no plugin header, so the few API entry points
 * used here are declared by hand, as QEMU 7.2's include/qemu/qemu-plugin.h defines them.
 * Every translated block adds its instruction count to one counter each time it runs (an inline
 * add, no callback), which is exact for single-threaded guests that do not fault mid-block.
 * At exit it prints "insns N" to stderr, or appends it to the file given as outfile=PATH.
 * Build: cc -shared -fPIC -O2 qemu_insn_count.c -o libinsn.so
 * Use:   qemu-aarch64 -plugin ./libinsn.so,outfile=counts.txt -d plugin ./program
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t insns;
static char outfile[4096];

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void) id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insns, qemu_plugin_tb_n_insns(tb));
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
    (void) id;
    (void) userdata;
    char line[64];
    snprintf(line, sizeof line, "insns %" PRIu64 "\n", insns);
    FILE *f = outfile[0] ? fopen(outfile, "a") : NULL;
    if (f) {
        fputs(line, f);
        fclose(f);
    } else {
        qemu_plugin_outs(line);
    }
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void) info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "outfile=", 8) == 0) {
            snprintf(outfile, sizeof outfile, "%s", argv[i] + 8);
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
