#!/bin/sh
# Run one MPI rank as a rank of a simulated node: CKPTFS_NODE_ID from the rank
# (PER_NODE consecutive ranks per node), and the ranks per node for the datasets (Open
# MPI's own local size counts every rank of this one machine).
export CKPTFS_NODE_ID="node$(( OMPI_COMM_WORLD_RANK / PER_NODE + 1 ))"
export CKPTFS_LOCAL_NRANKS="$PER_NODE"
exec "$@"
