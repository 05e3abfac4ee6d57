/* SPDX-License-Identifier: MIT */
/* mpi_fds.h: file descriptors between the ranks of one node (mpi_fds.c). */
#ifndef CUDALUA_MPI_FDS_H
#define CUDALUA_MPI_FDS_H

#include <lua.h>
#include <mpi.h>

/* Bind this rank's socket and learn every rank's: collective on comm. */
int mpi_fds_start(MPI_Comm comm, int rank, int size);
int mpi_fds_send(lua_State *L);
int mpi_fds_receive(lua_State *L);
int mpi_fds_close(lua_State *L);

#endif
