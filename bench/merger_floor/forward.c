/* The floor of a merger in C over librdkafka: read two replica topics from their start,
 * forward the first copy of each result id to the sink, drop the second. No merge logic
 * beyond a set of ids; see bench/merger_cpu.py (the floor-c variant).
 *
 *   forward BOOTSTRAP SINK TOPIC0 TOPIC1 PARTITIONS SECONDS
 *
 * Settings as arfl's merger: fetch.wait.max.ms 5, fetch.min.bytes 1; an idempotent producer,
 * acks all, linger.ms 1. Prints "results N duplicates M". */
#define _GNU_SOURCE
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS (1u << 20) /* ids of one run: a few 100,000 at most */
static uint64_t slots[SLOTS];

/* 1 when the id was seen before (an FNV-1a hash set: a bench floor, collisions ignored). */
static int seen(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    if (h == 0) h = 1;
    for (size_t i = h & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        if (slots[i] == h) return 1;
        if (slots[i] == 0) {
            slots[i] = h;
            return 0;
        }
    }
}

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char err[256];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s: %s\n", k, err);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: forward BOOTSTRAP SINK TOPIC0 TOPIC1 PARTITIONS SECONDS\n");
        return 2;
    }
    const char *sink = argv[2];
    int partitions = atoi(argv[5]);
    double seconds = atof(argv[6]);
    char err[512];
    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    set(cc, "bootstrap.servers", argv[1]);
    set(cc, "group.id", "arfl-merger-floor");
    set(cc, "enable.auto.commit", "false");
    set(cc, "fetch.wait.max.ms", "5");
    set(cc, "fetch.min.bytes", "1");
    rd_kafka_t *consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    set(pc, "bootstrap.servers", argv[1]);
    set(pc, "enable.idempotence", "true");
    set(pc, "acks", "all");
    set(pc, "linger.ms", "1");
    rd_kafka_t *producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof err);
    if (consumer == NULL || producer == NULL) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(2 * partitions);
    for (int t = 3; t <= 4; t++)
        for (int p = 0; p < partitions; p++)
            rd_kafka_topic_partition_list_add(parts, argv[t], p)->offset =
                RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(consumer, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    static const char field[] = "\"rid\":\"";
    long results = 0, duplicates = 0;
    for (double end = mono() + seconds; mono() < end;) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 50);
        if (m != NULL) {
            const char *v = m->payload;
            const char *rid = m->err ? NULL : memmem(v, m->len, field, sizeof field - 1);
            const char *close = NULL;
            if (rid != NULL) {
                rid += sizeof field - 1;
                close = memchr(rid, '"', m->len - (size_t)(rid - v));
            }
            if (close != NULL && seen(rid, (size_t)(close - rid))) {
                duplicates++;
            } else if (close != NULL) {
                results++;
                rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(sink),
                                  RD_KAFKA_V_PARTITION(m->partition),
                                  RD_KAFKA_V_KEY(m->key, m->key_len),
                                  RD_KAFKA_V_VALUE(m->payload, m->len),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
            }
            rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(producer, 0);
    }
    rd_kafka_flush(producer, 5000);
    printf("results %ld duplicates %ld\n", results, duplicates);
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    rd_kafka_destroy(producer);
    return 0;
}
