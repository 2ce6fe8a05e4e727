/* ld_mpi.c - MPI as one more way for a cluster's collectives, opened at run
   time with dlopen as the CUDA plugin opens cuBLAS and NCCL: ldist builds and
   runs where no MPI is installed, and under mpirun or srun on a cluster the
   gradients go through MPI_Allreduce and MPI's own transports (shared
   memory, InfiniBand through UCX).

   Only Open MPI's ABI is known here (libmpi.so.40, Debian's openmpi-bin):
   its handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM) are the addresses of
   global objects, found with dlsym. MPICH's handles are integers fixed in its
   header; a library without Open MPI's symbols is refused by name.

   MPI is initialised once per process (MPI_THREAD_SERIALIZED: the Lua thread
   and an executor thread's synchronized BatchNorm may both reduce, never at
   once) and finalised at exit, as mpirun expects of every rank. */
#include "ld_cluster_internal.h"
#include "ld_core.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *mpi_handle;           /* Open MPI: a pointer to a predefined object */

static struct {
    void *lib;
    int (*init_thread)(int *, char ***, int, int *);
    int (*initialized)(int *);
    int (*finalized)(int *);
    int (*finalize)(void);
    int (*comm_rank)(mpi_handle, int *);
    int (*comm_size)(mpi_handle, int *);
    int (*allreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle);
    int (*bcast)(void *, int, mpi_handle, int, mpi_handle);
    int (*barrier)(mpi_handle);
    mpi_handle world, f32, byte, sum;
    int rank, size, ready;
    char why[600];                  /* why MPI cannot be used, once a try failed */
} M;

#define OMPI_THREAD_SERIALIZED 2    /* Open MPI's MPI_THREAD_SERIALIZED */
#define OMPI_IN_PLACE ((void *)1)   /* Open MPI's MPI_IN_PLACE */

static void finalize_at_exit(void) {
    int done = 0;
    if (M.ready && M.finalized && !M.finalized(&done) && !done) M.finalize();
}

static int open_lib(void) {
    if (M.lib) return LD_OK;
    if (M.why[0]) return ld_fail(LD_EDEVICE, "%s", M.why);
    /* LDIST_MPI_LIB names the one to use (a cluster's own build of Open MPI) */
    const char *mine = getenv("LDIST_MPI_LIB");
    const char *names[] = {mine && *mine ? mine : "libmpi.so.40", mine && *mine ? NULL : "libmpi.so"};
    char tried[400] = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !M.lib; i++) {
        if (!names[i] || !*names[i]) continue;
        /* RTLD_GLOBAL: Open MPI's own components (dlopened by libmpi) resolve
           libmpi's symbols through the global scope */
        M.lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (!M.lib) {
            size_t at = strlen(tried);
            snprintf(tried + at, sizeof tried - at, "%s%s", at ? "; " : "", dlerror());
        }
    }
    if (!M.lib) {
        snprintf(M.why, sizeof M.why, "no MPI library (%s): install Open MPI (Debian: apt-get install openmpi-bin "
                 "libopenmpi-dev) or set LDIST_MPI_LIB to its libmpi.so", tried);
        return ld_fail(LD_EDEVICE, "%s", M.why);
    }
#define SYM(field, name) (*(void **)&M.field = dlsym(M.lib, name))
    SYM(init_thread, "MPI_Init_thread");
    SYM(initialized, "MPI_Initialized");
    SYM(finalized, "MPI_Finalized");
    SYM(finalize, "MPI_Finalize");
    SYM(comm_rank, "MPI_Comm_rank");
    SYM(comm_size, "MPI_Comm_size");
    SYM(allreduce, "MPI_Allreduce");
    SYM(bcast, "MPI_Bcast");
    SYM(barrier, "MPI_Barrier");
#undef SYM
    M.world = dlsym(M.lib, "ompi_mpi_comm_world");
    M.f32 = dlsym(M.lib, "ompi_mpi_float");
    M.byte = dlsym(M.lib, "ompi_mpi_byte");
    M.sum = dlsym(M.lib, "ompi_mpi_op_sum");
    if (!M.init_thread || !M.initialized || !M.finalized || !M.finalize || !M.comm_rank || !M.comm_size ||
        !M.allreduce || !M.bcast || !M.barrier) {
        snprintf(M.why, sizeof M.why, "the MPI library lacks MPI functions (MPI_Init_thread, MPI_Allreduce, ...)");
    } else if (!M.world || !M.f32 || !M.byte || !M.sum) {
        snprintf(M.why, sizeof M.why, "the MPI library is not Open MPI (no ompi_mpi_comm_world): ldist speaks Open "
                 "MPI's ABI only (Debian's openmpi-bin); LDIST_MPI_LIB may name an Open MPI libmpi.so");
    }
    if (M.why[0]) {
        dlclose(M.lib);
        M.lib = NULL;
        return ld_fail(LD_EDEVICE, "%s", M.why);
    }
    return LD_OK;
}

int ld_mpi_available(void) { return open_lib() == LD_OK; }

int ld_mpi_init(int *rank, int *size) {
    if (!M.ready) {
        if (open_lib()) return ld_error_status();
        int done = 0, provided = 0;
        M.initialized(&done);
        if (!done && M.init_thread(NULL, NULL, OMPI_THREAD_SERIALIZED, &provided))
            return ld_fail(LD_EDEVICE, "MPI_Init_thread failed");
        if (M.comm_rank(M.world, &M.rank) || M.comm_size(M.world, &M.size))
            return ld_fail(LD_EDEVICE, "MPI_Comm_rank/MPI_Comm_size failed");
        M.ready = 1;
        if (!done) atexit(finalize_at_exit);
    }
    if (rank) *rank = M.rank;
    if (size) *size = M.size;
    return LD_OK;
}

static int need_ready(const char *what) {
    if (!M.ready) return ld_fail(LD_EARG, "%s: MPI is not initialised (ld_mpi_init)", what);
    return LD_OK;
}

/* MPI counts are int: a larger buffer goes in pieces */
#define MPI_PIECE (1 << 30)

int ld_mpi_all_reduce(float *buf, int64_t n, int mean) {
    if (need_ready("all_reduce")) return ld_error_status();
    for (int64_t at = 0; at < n; at += MPI_PIECE) {
        int k = (int)(n - at < MPI_PIECE ? n - at : MPI_PIECE);
        if (M.allreduce(OMPI_IN_PLACE, buf + at, k, M.f32, M.sum, M.world))
            return ld_fail(LD_EDEVICE, "MPI_Allreduce of %d floats failed", k);
    }
    if (mean && M.size > 1) {
        /* the ring's rule: the sum times 1/N, so both give the same mean */
        float scale = 1.0f / (float)M.size;
        for (int64_t i = 0; i < n; i++) buf[i] *= scale;
    }
    return LD_OK;
}

int ld_mpi_broadcast(int root, void *buf, size_t nbytes) {
    if (need_ready("broadcast")) return ld_error_status();
    for (size_t at = 0; at < nbytes; at += MPI_PIECE) {
        int k = (int)(nbytes - at < MPI_PIECE ? nbytes - at : MPI_PIECE);
        if (M.bcast((char *)buf + at, k, M.byte, root, M.world))
            return ld_fail(LD_EDEVICE, "MPI_Bcast of %d bytes from rank %d failed", k, root);
    }
    return LD_OK;
}

int ld_mpi_barrier(void) {
    if (need_ready("barrier")) return ld_error_status();
    if (M.barrier(M.world)) return ld_fail(LD_EDEVICE, "MPI_Barrier failed");
    return LD_OK;
}
