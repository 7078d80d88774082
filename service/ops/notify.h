/* Telling the service manager how the start and the stop go (systemd Type=notify, through
 * libsystemd's sd_notify): READY=1 once every model is loaded and warm and the endpoints are bound,
 * STOPPING=1 when the drain begins, RELOADING=1 ... READY=1 around a reload, STATUS= lines.
 * Does nothing when the process was not started by one (no NOTIFY_SOCKET). */
#ifndef SIGSERVE_NOTIFY_H
#define SIGSERVE_NOTIFY_H

void notify_ready (const char *status);
void notify_reloading (void);
void notify_stopping (void);

#endif
