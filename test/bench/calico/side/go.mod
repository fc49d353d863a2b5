// This directory is a module of its own so that the project's go.mod never
// takes on Calico's libraries. build.sh builds it in a throwaway module
// against a Calico source tree; see the package comment of main.go.
module ipkeeper.local/calicoside

go 1.26
