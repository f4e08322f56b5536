/*
 * mpi.h — Zorilla's MPI for C programs running as WebAssembly workers.
 *
 * A subset of MPI 3.1 implemented over the Zorilla host API (zorilla.h):
 * every rank of MPI_COMM_WORLD is one worker of a rigid Zorilla job.
 * Build programs with sdk/bin/zmpicc, which works like mpicc.
 *
 * Only the calls declared here exist. The most common MPI calls this
 * library does not provide are declared "unavailable", so a program that
 * uses them fails to compile with the message "not provided by Zorilla's
 * MPI"; any other missing name fails to compile or link as undeclared.
 *
 * One-sided communication (MPI_Win) runs over the same messages as
 * point-to-point: a rank applies the puts, gets and accumulates aimed at
 * its windows, and answers lock requests, while it is inside an MPI call
 * that waits or tests (a Recv, Wait, Test, Probe, Barrier or other
 * collective, a window's fence, lock, flush, unlock, wait or free). A rank
 * that computes for a long time without calling MPI delays the one-sided
 * operations of the others on its windows until its next such call.
 *
 * Errors: MPI_ERRORS_ARE_FATAL (the default) prints the error and aborts
 * the job; MPI_ERRORS_RETURN makes calls return the error code instead.
 */
#ifndef ZMPI_MPI_H
#define ZMPI_MPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPI_VERSION 3
#define MPI_SUBVERSION 1

/* Opaque handles. */
typedef struct zmpi_comm *MPI_Comm;
typedef struct zmpi_group *MPI_Group;
typedef struct zmpi_type *MPI_Datatype;
typedef struct zmpi_op *MPI_Op;
typedef struct zmpi_request *MPI_Request;
typedef struct zmpi_errhandler *MPI_Errhandler;
typedef struct zmpi_info *MPI_Info;
typedef struct zmpi_win *MPI_Win;
typedef ptrdiff_t MPI_Aint;
typedef long long MPI_Count;
typedef long long MPI_Offset;

typedef struct MPI_Status {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    /* private */
    int zmpi_cancelled;
    long long zmpi_count; /* bytes received */
} MPI_Status;

#define MPI_STATUS_IGNORE ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)

/* Predefined objects. */
extern struct zmpi_comm zmpi_comm_world, zmpi_comm_self;
#define MPI_COMM_WORLD (&zmpi_comm_world)
#define MPI_COMM_SELF (&zmpi_comm_self)
#define MPI_COMM_NULL ((MPI_Comm)0)

extern struct zmpi_group zmpi_group_empty;
#define MPI_GROUP_EMPTY (&zmpi_group_empty)
#define MPI_GROUP_NULL ((MPI_Group)0)

#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_ERRHANDLER_NULL ((MPI_Errhandler)0)
#define MPI_INFO_NULL ((MPI_Info)0)
#define MPI_WIN_NULL ((MPI_Win)0)

extern struct zmpi_errhandler zmpi_errors_are_fatal, zmpi_errors_return;
#define MPI_ERRORS_ARE_FATAL (&zmpi_errors_are_fatal)
#define MPI_ERRORS_RETURN (&zmpi_errors_return)

#define ZMPI_TYPES(X) \
    X(MPI_CHAR, char) X(MPI_SIGNED_CHAR, signed_char) X(MPI_UNSIGNED_CHAR, unsigned_char) \
    X(MPI_SHORT, short) X(MPI_UNSIGNED_SHORT, unsigned_short) X(MPI_INT, int) \
    X(MPI_UNSIGNED, unsigned) X(MPI_LONG, long) X(MPI_UNSIGNED_LONG, unsigned_long) \
    X(MPI_LONG_LONG_INT, long_long) X(MPI_UNSIGNED_LONG_LONG, unsigned_long_long) \
    X(MPI_INT8_T, int8) X(MPI_INT16_T, int16) X(MPI_INT32_T, int32) X(MPI_INT64_T, int64) \
    X(MPI_UINT8_T, uint8) X(MPI_UINT16_T, uint16) X(MPI_UINT32_T, uint32) X(MPI_UINT64_T, uint64) \
    X(MPI_FLOAT, float) X(MPI_DOUBLE, double) X(MPI_LONG_DOUBLE, long_double) \
    X(MPI_C_BOOL, c_bool) X(MPI_WCHAR, wchar) X(MPI_BYTE, byte) X(MPI_PACKED, packed) \
    X(MPI_FLOAT_INT, float_int) X(MPI_DOUBLE_INT, double_int) X(MPI_LONG_INT, long_int) \
    X(MPI_2INT, 2int) X(MPI_SHORT_INT, short_int) X(MPI_LONG_DOUBLE_INT, long_double_int) \
    X(MPI_AINT, aint) X(MPI_OFFSET, offset) X(MPI_COUNT, count)

#define ZMPI_DECLARE_TYPE(name, id) extern struct zmpi_type zmpi_type_##id;
ZMPI_TYPES(ZMPI_DECLARE_TYPE)
#undef ZMPI_DECLARE_TYPE

#define MPI_CHAR (&zmpi_type_char)
#define MPI_SIGNED_CHAR (&zmpi_type_signed_char)
#define MPI_UNSIGNED_CHAR (&zmpi_type_unsigned_char)
#define MPI_SHORT (&zmpi_type_short)
#define MPI_UNSIGNED_SHORT (&zmpi_type_unsigned_short)
#define MPI_INT (&zmpi_type_int)
#define MPI_UNSIGNED (&zmpi_type_unsigned)
#define MPI_LONG (&zmpi_type_long)
#define MPI_UNSIGNED_LONG (&zmpi_type_unsigned_long)
#define MPI_LONG_LONG_INT (&zmpi_type_long_long)
#define MPI_LONG_LONG MPI_LONG_LONG_INT
#define MPI_UNSIGNED_LONG_LONG (&zmpi_type_unsigned_long_long)
#define MPI_INT8_T (&zmpi_type_int8)
#define MPI_INT16_T (&zmpi_type_int16)
#define MPI_INT32_T (&zmpi_type_int32)
#define MPI_INT64_T (&zmpi_type_int64)
#define MPI_UINT8_T (&zmpi_type_uint8)
#define MPI_UINT16_T (&zmpi_type_uint16)
#define MPI_UINT32_T (&zmpi_type_uint32)
#define MPI_UINT64_T (&zmpi_type_uint64)
#define MPI_FLOAT (&zmpi_type_float)
#define MPI_DOUBLE (&zmpi_type_double)
#define MPI_LONG_DOUBLE (&zmpi_type_long_double)
#define MPI_C_BOOL (&zmpi_type_c_bool)
#define MPI_WCHAR (&zmpi_type_wchar)
#define MPI_BYTE (&zmpi_type_byte)
#define MPI_PACKED (&zmpi_type_packed)
#define MPI_FLOAT_INT (&zmpi_type_float_int)
#define MPI_DOUBLE_INT (&zmpi_type_double_int)
#define MPI_LONG_INT (&zmpi_type_long_int)
#define MPI_2INT (&zmpi_type_2int)
#define MPI_SHORT_INT (&zmpi_type_short_int)
#define MPI_LONG_DOUBLE_INT (&zmpi_type_long_double_int)
#define MPI_AINT (&zmpi_type_aint)
#define MPI_OFFSET (&zmpi_type_offset)
#define MPI_COUNT (&zmpi_type_count)

#define ZMPI_OPS(X) \
    X(MPI_MAX, max) X(MPI_MIN, min) X(MPI_SUM, sum) X(MPI_PROD, prod) \
    X(MPI_LAND, land) X(MPI_LOR, lor) X(MPI_LXOR, lxor) \
    X(MPI_BAND, band) X(MPI_BOR, bor) X(MPI_BXOR, bxor) \
    X(MPI_MAXLOC, maxloc) X(MPI_MINLOC, minloc) X(MPI_REPLACE, replace) X(MPI_NO_OP, no_op)
#define ZMPI_DECLARE_OP(name, id) extern struct zmpi_op zmpi_op_##id;
ZMPI_OPS(ZMPI_DECLARE_OP)
#undef ZMPI_DECLARE_OP
#define MPI_MAX (&zmpi_op_max)
#define MPI_MIN (&zmpi_op_min)
#define MPI_SUM (&zmpi_op_sum)
#define MPI_PROD (&zmpi_op_prod)
#define MPI_LAND (&zmpi_op_land)
#define MPI_LOR (&zmpi_op_lor)
#define MPI_LXOR (&zmpi_op_lxor)
#define MPI_BAND (&zmpi_op_band)
#define MPI_BOR (&zmpi_op_bor)
#define MPI_BXOR (&zmpi_op_bxor)
#define MPI_MAXLOC (&zmpi_op_maxloc)
#define MPI_MINLOC (&zmpi_op_minloc)
#define MPI_REPLACE (&zmpi_op_replace)
#define MPI_NO_OP (&zmpi_op_no_op)

/* Constants. */
#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-3)
#define MPI_UNDEFINED (-32766)
#define MPI_TAG_UB_VALUE 0x3fffffff
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256
#define MPI_BSEND_OVERHEAD 0
#define MPI_IN_PLACE ((void *)1)
#define MPI_BOTTOM ((void *)0)
#define MPI_UNWEIGHTED ((int *)2)
#define MPI_WEIGHTS_EMPTY ((int *)3)
#define MPI_MAX_OBJECT_NAME 128
#define MPI_MAX_INFO_KEY 255
#define MPI_MAX_INFO_VAL 1024

/* Comm_compare results. */
#define MPI_IDENT 0
#define MPI_CONGRUENT 1
#define MPI_SIMILAR 2
#define MPI_UNEQUAL 3

/* Thread levels. */
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

/* Topology kinds. */
#define MPI_CART 1
#define MPI_GRAPH 2
#define MPI_DIST_GRAPH 3

/* One-sided: lock types and assertions (assertions are hints, ignored). */
#define MPI_LOCK_EXCLUSIVE 234
#define MPI_LOCK_SHARED 235
#define MPI_MODE_NOCHECK 1024
#define MPI_MODE_NOSTORE 2048
#define MPI_MODE_NOPUT 4096
#define MPI_MODE_NOPRECEDE 8192
#define MPI_MODE_NOSUCCEED 16384

/* Error classes (also the codes this library returns). */
#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_REQUEST 7
#define MPI_ERR_ROOT 8
#define MPI_ERR_GROUP 9
#define MPI_ERR_OP 10
#define MPI_ERR_TOPOLOGY 11
#define MPI_ERR_DIMS 12
#define MPI_ERR_ARG 13
#define MPI_ERR_UNKNOWN 14
#define MPI_ERR_TRUNCATE 15
#define MPI_ERR_OTHER 16
#define MPI_ERR_INTERN 17
#define MPI_ERR_IN_STATUS 18
#define MPI_ERR_PENDING 19
#define MPI_ERR_NO_MEM 34
#define MPI_ERR_WIN 45
#define MPI_ERR_BASE 46
#define MPI_ERR_SIZE 47
#define MPI_ERR_DISP 48
#define MPI_ERR_INFO 49
#define MPI_ERR_LOCKTYPE 50
#define MPI_ERR_ASSERT 51
#define MPI_ERR_RMA_CONFLICT 52
#define MPI_ERR_RMA_SYNC 53
#define MPI_ERR_RMA_RANGE 54
#define MPI_ERR_INFO_KEY 55
#define MPI_ERR_INFO_VALUE 56
#define MPI_ERR_INFO_NOKEY 57
#define MPI_ERR_LASTCODE 64

typedef void MPI_User_function(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);
typedef void MPI_Comm_errhandler_function(MPI_Comm *comm, int *code, ...);

/* Environment. */
int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Finalize(void);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Query_thread(int *provided);
int MPI_Get_processor_name(char *name, int *resultlen);
int MPI_Get_version(int *version, int *subversion);
double MPI_Wtime(void);
double MPI_Wtick(void);

/* Errors. */
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler);
int MPI_Errhandler_free(MPI_Errhandler *errhandler);
int MPI_Error_string(int errorcode, char *string, int *resultlen);
int MPI_Error_class(int errorcode, int *errorclass);

/* Point to point. */
int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);
int MPI_Get_elements(const MPI_Status *status, MPI_Datatype datatype, int *count);

/* Requests. */
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]);
int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status);
int MPI_Request_free(MPI_Request *request);

/* Persistent requests: the arguments are kept, each MPI_Start begins one
 * operation with them, and Wait/Test complete it (the request stays). */
int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Start(MPI_Request *request);
int MPI_Startall(int count, MPI_Request requests[]);

/* Collectives. */
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm);
int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm);
int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                  const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Op_create(MPI_User_function *function, int commute, MPI_Op *op);
int MPI_Op_free(MPI_Op *op);
int MPI_Op_commutative(MPI_Op op, int *commute);
int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype,
                     MPI_Op op);

/* Datatypes. */
int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype);
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype);
int MPI_Type_indexed(int count, const int blocklengths[], const int displacements[],
                     MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_hindexed(int count, const int blocklengths[],
                             const MPI_Aint displacements[], MPI_Datatype oldtype,
                             MPI_Datatype *newtype);
int MPI_Type_create_indexed_block(int count, int blocklength, const int displacements[],
                                  MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_struct(int count, const int blocklengths[], const MPI_Aint displacements[],
                           const MPI_Datatype types[], MPI_Datatype *newtype);
int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype);
int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_commit(MPI_Datatype *datatype);
int MPI_Type_free(MPI_Datatype *datatype);
int MPI_Type_size(MPI_Datatype datatype, int *size);
int MPI_Type_set_name(MPI_Datatype datatype, const char *name);
int MPI_Type_get_name(MPI_Datatype datatype, char *name, int *resultlen);
int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent);
int MPI_Type_get_true_extent(MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent);
int MPI_Get_address(const void *location, MPI_Aint *address);
int MPI_Pack(const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize,
             int *position, MPI_Comm comm);
int MPI_Unpack(const void *inbuf, int insize, int *position, void *outbuf, int outcount,
               MPI_Datatype datatype, MPI_Comm comm);
int MPI_Pack_size(int incount, MPI_Datatype datatype, MPI_Comm comm, int *size);

/* Communicators and groups. */
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result);
int MPI_Comm_group(MPI_Comm comm, MPI_Group *group);
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm);
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm);
int MPI_Comm_test_inter(MPI_Comm comm, int *flag);
int MPI_Comm_set_name(MPI_Comm comm, const char *name);
int MPI_Comm_get_name(MPI_Comm comm, char *name, int *resultlen);
int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_excl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_free(MPI_Group *group);
int MPI_Group_size(MPI_Group group, int *size);
int MPI_Group_rank(MPI_Group group, int *rank);
int MPI_Group_translate_ranks(MPI_Group group1, int n, const int ranks1[], MPI_Group group2,
                              int ranks2[]);
int MPI_Group_compare(MPI_Group group1, MPI_Group group2, int *result);

/* Cartesian topologies. */
int MPI_Dims_create(int nnodes, int ndims, int dims[]);
int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *comm_cart);
int MPI_Cart_rank(MPI_Comm comm, const int coords[], int *rank);
int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int coords[]);
int MPI_Cart_shift(MPI_Comm comm, int direction, int disp, int *rank_source, int *rank_dest);
int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm);
int MPI_Cart_get(MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[]);
int MPI_Cartdim_get(MPI_Comm comm, int *ndims);
int MPI_Topo_test(MPI_Comm comm, int *status);

/* Distributed graph topologies (weights are kept and given back). */
int MPI_Dist_graph_create_adjacent(MPI_Comm comm_old, int indegree, const int sources[],
                                   const int sourceweights[], int outdegree,
                                   const int destinations[], const int destweights[],
                                   MPI_Info info, int reorder, MPI_Comm *comm_dist_graph);
int MPI_Dist_graph_create(MPI_Comm comm_old, int n, const int sources[], const int degrees[],
                          const int destinations[], const int weights[], MPI_Info info,
                          int reorder, MPI_Comm *comm_dist_graph);
int MPI_Dist_graph_neighbors_count(MPI_Comm comm, int *indegree, int *outdegree, int *weighted);
int MPI_Dist_graph_neighbors(MPI_Comm comm, int maxindegree, int sources[], int sourceweights[],
                             int maxoutdegree, int destinations[], int destweights[]);

/* Neighborhood collectives (Cartesian and distributed graph topologies). */
int MPI_Neighbor_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                           void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Neighbor_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                            void *recvbuf, const int recvcounts[], const int displs[],
                            MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Neighbor_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                          void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Neighbor_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                           const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Neighbor_alltoallw(const void *sendbuf, const int sendcounts[],
                           const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
                           void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[],
                           const MPI_Datatype recvtypes[], MPI_Comm comm);

/* Info objects: (key, value) strings. */
int MPI_Info_create(MPI_Info *info);
int MPI_Info_set(MPI_Info info, const char *key, const char *value);
int MPI_Info_get(MPI_Info info, const char *key, int valuelen, char *value, int *flag);
int MPI_Info_get_string(MPI_Info info, const char *key, int *buflen, char *value, int *flag);
int MPI_Info_get_valuelen(MPI_Info info, const char *key, int *valuelen, int *flag);
int MPI_Info_get_nkeys(MPI_Info info, int *nkeys);
int MPI_Info_get_nthkey(MPI_Info info, int n, char *key);
int MPI_Info_delete(MPI_Info info, const char *key);
int MPI_Info_dup(MPI_Info info, MPI_Info *newinfo);
int MPI_Info_free(MPI_Info *info);

/* One-sided communication (see the progress rule at the top). */
int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                   MPI_Win *win);
int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
                     MPI_Win *win);
int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win *win);
int MPI_Win_attach(MPI_Win win, void *base, MPI_Aint size);
int MPI_Win_detach(MPI_Win win, const void *base);
int MPI_Win_free(MPI_Win *win);
int MPI_Win_get_group(MPI_Win win, MPI_Group *group);
int MPI_Win_set_name(MPI_Win win, const char *name);
int MPI_Win_get_name(MPI_Win win, char *name, int *resultlen);
int MPI_Put(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
            int target_rank, MPI_Aint target_disp, int target_count,
            MPI_Datatype target_datatype, MPI_Win win);
int MPI_Get(void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
            MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win);
int MPI_Accumulate(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                   int target_rank, MPI_Aint target_disp, int target_count,
                   MPI_Datatype target_datatype, MPI_Op op, MPI_Win win);
int MPI_Get_accumulate(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                       void *result_addr, int result_count, MPI_Datatype result_datatype,
                       int target_rank, MPI_Aint target_disp, int target_count,
                       MPI_Datatype target_datatype, MPI_Op op, MPI_Win win);
int MPI_Fetch_and_op(const void *origin_addr, void *result_addr, MPI_Datatype datatype,
                     int target_rank, MPI_Aint target_disp, MPI_Op op, MPI_Win win);
int MPI_Compare_and_swap(const void *origin_addr, const void *compare_addr, void *result_addr,
                         MPI_Datatype datatype, int target_rank, MPI_Aint target_disp,
                         MPI_Win win);
int MPI_Win_fence(int assert, MPI_Win win);
int MPI_Win_post(MPI_Group group, int assert, MPI_Win win);
int MPI_Win_start(MPI_Group group, int assert, MPI_Win win);
int MPI_Win_complete(MPI_Win win);
int MPI_Win_wait(MPI_Win win);
int MPI_Win_test(MPI_Win win, int *flag);
int MPI_Win_lock(int lock_type, int rank, int assert, MPI_Win win);
int MPI_Win_unlock(int rank, MPI_Win win);
int MPI_Win_lock_all(int assert, MPI_Win win);
int MPI_Win_unlock_all(MPI_Win win);
int MPI_Win_flush(int rank, MPI_Win win);
int MPI_Win_flush_all(MPI_Win win);
int MPI_Win_flush_local(int rank, MPI_Win win);
int MPI_Win_flush_local_all(MPI_Win win);
int MPI_Win_sync(MPI_Win win);
int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);
int MPI_Free_mem(void *base);

/*
 * Zorilla extensions (not MPI; MPI has no application-level checkpoints).
 * A rank hands the node its state as bytes; the node keeps the latest
 * complete checkpoint of each rank on other machines of the grid, and the
 * fresh worker that replaces a lost rank loads it instead of starting over.
 * A save is collective over MPI_COMM_WORLD (a barrier, then every rank saves
 * under the same generation): with on_worker_lost = "rollback", a lost rank
 * sends every rank back to the latest generation all of them hold, and
 * each fresh worker finds its rank's checkpoint of that generation
 * (ZMPI_Checkpoint_size / _load). Errors go to MPI_COMM_WORLD's error
 * handler.
 */
/* Collective: keeps `size` bytes at `buf` as this rank's latest checkpoint
 * (at most ZORILLA_MAX_CHECKPOINT, 256 MiB, or the node's smaller limit:
 * MPI_ERR_COUNT beyond it), under the generation after the last one. Every
 * rank must call it at the same point of the computation. `copies` (may be
 * NULL) receives on how many machines it is kept. MPI_ERR_OTHER if the node
 * could not keep it. */
int ZMPI_Checkpoint_save(const void *buf, int size, int *copies);
/* Whether this rank has a checkpoint (`flag`, 0 on a first start) and its
 * size in bytes. */
int ZMPI_Checkpoint_size(int *size, int *flag);
/* Copies this rank's latest checkpoint into `buf` (`cap` bytes): `flag` 0 if
 * there is none; MPI_ERR_TRUNCATE (nothing copied, `size` set) if it does not
 * fit. */
int ZMPI_Checkpoint_load(void *buf, int cap, int *size, int *flag);

/* Common MPI calls this library does not provide: using one is a compile error. */
#define ZMPI_UNAVAILABLE __attribute__((unavailable("not provided by Zorilla's MPI")))
ZMPI_UNAVAILABLE int MPI_Bsend(const void *, int, MPI_Datatype, int, int, MPI_Comm);
ZMPI_UNAVAILABLE int MPI_Ibsend(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Buffer_attach(void *, int);
ZMPI_UNAVAILABLE int MPI_Buffer_detach(void *, int *);
ZMPI_UNAVAILABLE int MPI_Cancel(MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Waitsome(int, MPI_Request *, int *, int *, MPI_Status *);
ZMPI_UNAVAILABLE int MPI_Testsome(int, MPI_Request *, int *, int *, MPI_Status *);
ZMPI_UNAVAILABLE int MPI_Mprobe(int, int, MPI_Comm, void *, MPI_Status *);
ZMPI_UNAVAILABLE int MPI_Improbe(int, int, MPI_Comm, int *, void *, MPI_Status *);
ZMPI_UNAVAILABLE int MPI_Ibarrier(MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ibcast(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ireduce(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iallreduce(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ialltoall(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iallgather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iallgatherv(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ialltoallv(const void *, const int[], const int[], MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ialltoallw(const void *, const int[], const int[], const MPI_Datatype[], void *, const int[], const int[], const MPI_Datatype[], MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Igather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Igatherv(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iscatter(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iscatterv(const void *, const int[], const int[], MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ireduce_scatter(const void *, void *, const int[], MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ireduce_scatter_block(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Iscan(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ineighbor_allgather(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ineighbor_allgatherv(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ineighbor_alltoall(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ineighbor_alltoallv(const void *, const int[], const int[], MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Ineighbor_alltoallw(const void *, const int[], const MPI_Aint[], const MPI_Datatype[], void *, const int[], const MPI_Aint[], const MPI_Datatype[], MPI_Comm, MPI_Request *);
/* MPI-4 persistent collectives. */
ZMPI_UNAVAILABLE int MPI_Barrier_init(MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Bcast_init(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Reduce_init(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Allreduce_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Gather_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Gatherv_init(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Scatter_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Scatterv_init(const void *, const int[], const int[], MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Allgather_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Allgatherv_init(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Alltoall_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Alltoallv_init(const void *, const int[], const int[], MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Alltoallw_init(const void *, const int[], const int[], const MPI_Datatype[], void *, const int[], const int[], const MPI_Datatype[], MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Reduce_scatter_init(const void *, void *, const int[], MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Reduce_scatter_block_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_File_open(MPI_Comm, const char *, int, MPI_Info, void *);
ZMPI_UNAVAILABLE int MPI_Win_allocate_shared(MPI_Aint, int, MPI_Info, MPI_Comm, void *, MPI_Win *);
ZMPI_UNAVAILABLE int MPI_Win_shared_query(MPI_Win, int, MPI_Aint *, int *, void *);
ZMPI_UNAVAILABLE int MPI_Rput(const void *, int, MPI_Datatype, int, MPI_Aint, int, MPI_Datatype, MPI_Win, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Rget(void *, int, MPI_Datatype, int, MPI_Aint, int, MPI_Datatype, MPI_Win, MPI_Request *);
ZMPI_UNAVAILABLE int MPI_Win_get_attr(MPI_Win, int, void *, int *);
ZMPI_UNAVAILABLE int MPI_Comm_spawn(const char *, char *[], int, MPI_Info, int, MPI_Comm, MPI_Comm *, int[]);
ZMPI_UNAVAILABLE int MPI_Intercomm_create(MPI_Comm, int, MPI_Comm, int, int, MPI_Comm *);
ZMPI_UNAVAILABLE int MPI_Graph_create(MPI_Comm, int, const int[], const int[], int, MPI_Comm *);
ZMPI_UNAVAILABLE int MPI_Comm_set_attr(MPI_Comm, int, void *);
ZMPI_UNAVAILABLE int MPI_Comm_get_attr(MPI_Comm, int, void *, int *);
ZMPI_UNAVAILABLE int MPI_Comm_create_keyval(void *, void *, int *, void *);
ZMPI_UNAVAILABLE int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function *, MPI_Errhandler *);
ZMPI_UNAVAILABLE int MPI_Group_union(MPI_Group, MPI_Group, MPI_Group *);
ZMPI_UNAVAILABLE int MPI_Group_intersection(MPI_Group, MPI_Group, MPI_Group *);
ZMPI_UNAVAILABLE int MPI_Group_difference(MPI_Group, MPI_Group, MPI_Group *);
ZMPI_UNAVAILABLE int MPI_Group_range_incl(MPI_Group, int, int[][3], MPI_Group *);
ZMPI_UNAVAILABLE int MPI_Group_range_excl(MPI_Group, int, int[][3], MPI_Group *);
ZMPI_UNAVAILABLE int MPI_Type_create_subarray(int, const int[], const int[], const int[], int, MPI_Datatype, MPI_Datatype *);
ZMPI_UNAVAILABLE int MPI_Type_create_darray(int, int, int, const int[], const int[], const int[], const int[], int, MPI_Datatype, MPI_Datatype *);
ZMPI_UNAVAILABLE int MPI_Pcontrol(const int, ...);

#ifdef __cplusplus
}
#endif

#endif /* ZMPI_MPI_H */
