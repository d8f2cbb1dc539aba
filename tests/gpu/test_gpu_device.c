/*
 * test_gpu_device.c — the CUDA runtime finds a device and can describe it.
 * Skips (exit 77) with the runtime's reason when there is none.
 */
#include "testutil.h"

#include "cuda/cuda_device.h"
#include "error.h"

#include <stdio.h>
#include <string.h>

static int ifd__n_devices;

START_TEST(test_describe_every_device)
{
    for (int i = 0; i < ifd__n_devices; i++) {
        char buf[256];
        ck_assert_int_eq(ifd_cuda_device_describe(i, buf, sizeof buf), 0);
        ck_assert_ptr_ne(strstr(buf, "sm_"), NULL);
        printf("cuda:%d: %s\n", i, buf);
    }
}
END_TEST

int main(void)
{
    char err[256];
    if (ifd_cuda_device_count(&ifd__n_devices, err, sizeof err) != 0)
        ifd_test_skip("no CUDA device (%s)", err);
    Suite *s = suite_create("gpu_device");
    ifd_test_case(s, "device", 0, IFD_TESTS(test_describe_every_device));
    return ifd_test_run(s);
}
