//go:build !unix

package lambdatest

func groupKiller([]int) func() { return func() {} }
