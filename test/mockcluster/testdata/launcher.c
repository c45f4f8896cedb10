/*
 * launcher: librdkafka's mock cluster as a process, for test/mockcluster.
 *
 *   launcher BROKERS TOPIC:PARTITIONS[:RF] ...
 *
 * Starts a mock cluster of BROKERS brokers (listening on 127.0.0.1, ports
 * chosen by the system), creates each topic, prints the bootstrap servers
 * as one line, then answers commands read from stdin, one per line, with
 * "ok" or "error: ...":
 *
 *   leader TOPIC PARTITION BROKER   move the partition's leader
 *   down BROKER                     disconnect the broker, refuse connections
 *   up BROKER                       accept connections again
 *   coordinator GROUP BROKER        make BROKER the group's coordinator
 *
 * It exits at the end of stdin. MOCK_DEBUG (librdkafka's debug contexts,
 * e.g. mock) logs what the brokers receive to stderr. Built by the test with
 * gcc launcher.c -lrdkafka (Debian librdkafka-dev).
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply(rd_kafka_resp_err_t err) {
        if (err)
                printf("error: %s\n", rd_kafka_err2str(err));
        else
                printf("ok\n");
        fflush(stdout);
}

int main(int argc, char **argv) {
        char errstr[512], line[1024];
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        rd_kafka_mock_cluster_t *mc;
        int brokers, i;

        if (argc < 2 || (brokers = atoi(argv[1])) < 1) {
                fprintf(stderr, "usage: %s BROKERS TOPIC:PARTITIONS[:RF] ...\n", argv[0]);
                return 2;
        }
        /* The mock cluster needs a client instance to live in; this one
         * never connects anywhere (no bootstrap servers). */
        conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "%s\n", errstr);
                return 1;
        }
        /* MOCK_DEBUG=mock logs what the brokers receive, to stderr. */
        if (getenv("MOCK_DEBUG") &&
            rd_kafka_conf_set(conf, "debug", getenv("MOCK_DEBUG"), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "%s\n", errstr);
                return 1;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "rd_kafka_new: %s\n", errstr);
                return 1;
        }
        /* Every mock broker listens on 127.0.0.1 (rdkafka_mock.c binds
         * INADDR_LOOPBACK), on a port the system picks. */
        mc = rd_kafka_mock_cluster_new(rk, brokers);
        if (!mc) {
                fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
                return 1;
        }
        for (i = 2; i < argc; i++) {
                char topic[256];
                int partitions = 0, rf = brokers;
                rd_kafka_resp_err_t err;
                if (sscanf(argv[i], "%255[^:]:%d:%d", topic, &partitions, &rf) < 2 || partitions < 1) {
                        fprintf(stderr, "bad topic %s: want TOPIC:PARTITIONS[:RF]\n", argv[i]);
                        return 2;
                }
                err = rd_kafka_mock_topic_create(mc, topic, partitions, rf);
                if (err) {
                        fprintf(stderr, "creating %s: %s\n", topic, rd_kafka_err2str(err));
                        return 1;
                }
        }
        printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
        fflush(stdout);

        while (fgets(line, sizeof(line), stdin)) {
                char cmd[32], a[256];
                int x = -1, y = -1, n;
                line[strcspn(line, "\r\n")] = 0;
                if (!*line)
                        continue;
                n = sscanf(line, "%31s", cmd);
                if (n != 1)
                        continue;
                if (!strcmp(cmd, "leader") && sscanf(line, "%*s %255s %d %d", a, &x, &y) == 3)
                        reply(rd_kafka_mock_partition_set_leader(mc, a, x, y));
                else if (!strcmp(cmd, "down") && sscanf(line, "%*s %d", &x) == 1)
                        reply(rd_kafka_mock_broker_set_down(mc, x));
                else if (!strcmp(cmd, "up") && sscanf(line, "%*s %d", &x) == 1)
                        reply(rd_kafka_mock_broker_set_up(mc, x));
                else if (!strcmp(cmd, "coordinator") && sscanf(line, "%*s %255s %d", a, &x) == 2)
                        reply(rd_kafka_mock_coordinator_set(mc, "group", a, x));
                else {
                        printf("error: unknown command: %s\n", line);
                        fflush(stdout);
                }
        }
        rd_kafka_mock_cluster_destroy(mc);
        rd_kafka_destroy(rk);
        return 0;
}
