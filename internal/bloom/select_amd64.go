//go:build amd64

package bloom

// fastPDEP: the CPU has BMI2's PDEP at a few cycles. Intel's do from
// Haswell on; AMD's before Zen 3 (family 0x19) run it in microcode, tens to
// hundreds of cycles depending on the mask, as do Hygon's: there the
// portable select64 is faster.
var fastPDEP = detectFastPDEP()

func detectFastPDEP() bool {
	if !hasBMI2() {
		return false
	}
	_, b, c, d := cpuid(0, 0)
	switch {
	case b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e: // GenuineIntel
		return true
	case b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163: // AuthenticAMD
		eax, _, _, _ := cpuid(1, 0)
		family := eax >> 8 & 0xf
		if family == 0xf {
			family += eax >> 20 & 0xff
		}
		return family >= 0x19
	}
	return false
}

// hasBMI2: CPUID leaf 7 lists BMI2 (PDEP among it).
func hasBMI2() bool {
	if maxID, _, _, _ := cpuid(0, 0); maxID < 7 {
		return false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return ebx&(1<<8) != 0
}

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// selectPDEP is select64 with PDEP: the k-th set bit of x is where PDEP
// deposits 1<<k under the mask x; TZCNT gives its position.
func selectPDEP(x uint64, k uint) uint

// select64 is the position of the k-th (0-based) set bit of x, which has
// more than k set bits.
func select64(x uint64, k uint) uint {
	if fastPDEP {
		return selectPDEP(x, k)
	}
	return selectPortable(x, k)
}
