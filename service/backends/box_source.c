/* The mailboxes' source (box_source.h). */
#include "backends/box_source.h"

#include <pthread.h>

#define PAGE 4096u

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static void *(*s_alloc) (void *arg, size_t bytes);
static void *s_arg;

void box_source_set (void *(*alloc) (void *arg, size_t bytes), void *arg)
{
    pthread_mutex_lock (&s_lock);
    s_alloc = alloc;
    s_arg = arg;
    pthread_mutex_unlock (&s_lock);
}

bool box_source_active (void)
{
    pthread_mutex_lock (&s_lock);
    const bool on = s_alloc != NULL;
    pthread_mutex_unlock (&s_lock);
    return on;
}

void *box_source_alloc (size_t bytes, size_t *got)
{
    const size_t pages = (bytes + PAGE - 1) / PAGE * PAGE;
    pthread_mutex_lock (&s_lock);
    void *p = s_alloc && bytes ? s_alloc (s_arg, pages) : NULL;
    pthread_mutex_unlock (&s_lock);
    if (p && got)
        *got = pages;
    return p;
}
