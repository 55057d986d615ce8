{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Global pooling (Keras @GlobalMaxPooling1D/2D@, @GlobalAveragePooling1D/2D@):
each channel reduced over all @n = H * W@ beats of an image (a 1-D sequence is
an image one row high), one output beat per image.

= Arithmetic (docs/guide/contract.md, "Global pooling")

* Max: per channel maximum of the @n@ values (exact).
* Average: per channel, on raw integers, @floor ((2 * sum + n) / (2 * n))@:
  round to nearest, ties toward +infinity, exact. The running sum is a
  @Signed (i + f + CLog 2 n + 2)@, wide enough for @2 * sum + n@, so it never
  wraps or saturates; the division is 'K2C.Pool.roundedQuotient' (a shift when
  @2 * n@ is a power of two, a division by a constant otherwise). The mean of
  in-range values is in range: the output format is the input format.

= Why it looks like this

No frame buffer: one running register per channel (the maximum so far, or
the exact sum so far), overwritten by an image's first beat and combined with
each later one, plus an output register, so the next image can stream in
while a result waits for downstream. The input beat is registered before it
is combined: the block before is often a queue read from LUT RAM
("K2C.Fifo"), and its read multiplexers, the comparison or sum and the
running register's multiplexer would be one path (conv1d_waves on ECP5: 19
logic levels, 10.5 ns).
Storage: @c@ running values (@i + f@ bits for max, @i + f + CLog 2 n + 2@ for
the sum), the input beat (@c * (i + f)@ bits and a valid bit), @c * (i + f)@
output bits, an @Index n@ counter and a flag.

= Protocol and exact timing

Input ready is @not (full and pending)@ (registered state only: independent
of the input's valid and of downstream's ready). The output is the output
register.

* A beat accepted in cycle @q@ waits in the input register and is combined
  in the first cycle @c > q@ in which no finished result is pending; the
  input register takes the next beat in that same cycle.
* The image's @n@-th beat, combined in cycle @c@, makes the result valid in
  cycle @c + 1@ if the output register is empty or its result leaves in
  cycle @c@. Otherwise the finished value waits in the running register
  (@pending@) and becomes valid the cycle after the held result leaves;
  beats are combined again from that cycle.
* So with downstream always ready the block never stalls its input: one beat
  per cycle, images back to back, each result valid two cycles after the
  image's last beat.
-}
module K2C.Global
  ( globalMax
  , globalAverage
  , globalReduce
  ) where

import Clash.Prelude
import Data.Maybe (isJust, isNothing)

import K2C.Pool (roundedQuotient)
import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | Per channel maximum over the @n@ beats of an image.
globalMax
  :: forall dom n c i f
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat c, KnownNat i, KnownNat f)
  => SNat n -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
globalMax n = globalReduce n id max id

-- | Per channel rounded mean over the @n@ beats of an image (module header).
globalAverage
  :: forall dom n c i f
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat c, KnownNat i, KnownNat f)
  => SNat n -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
globalAverage n = globalReduce n toWide (+) fromWide
  where
    toWide :: SFixed i f -> Signed (i + f + CLog 2 n + 2)
    toWide = resize . unSF
    fromWide :: Signed (i + f + CLog 2 n + 2) -> SFixed i f
    fromWide = sf (SNat @f) . resize . roundedQuotient n

-- | The block: @start@ turns a value into the running type, @combine@ adds
-- one more value to it (associative, exact), @finish@ gives the result.
globalReduce
  :: forall dom n c a r b
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, KnownNat c, NFDataX a, NFDataX r, NFDataX b)
  => SNat n -> (a -> r) -> (r -> r -> r) -> (r -> b) -> Stream dom (Vec c a) (Vec c b)
globalReduce SNat start combine finish (input, readyOut) = (output, readyIn)
  where
    -- The input register: a beat waits here for one cycle at least.
    beat      = register Nothing (nextBeat <$> accepted <*> combines <*> input <*> beat)
    nextBeat acc comb new old
      | acc       = new
      | comb      = Nothing
      | otherwise = old
    full      = isJust <$> beat
    combines  = full .&&. (not <$> pending)
    readyIn   = (not <$> full) .||. (not <$> pending)
    accepted  = readyIn .&&. (isJust <$> input)
    count     = register (0 :: Index n) (mux combines (nextIndex <$> count) count)
    pending   = register False ((completes .||. pending) .&&. (not <$> outFree))
    completes = combines .&&. ((== maxBound) <$> count)
    outFree   = (isNothing <$> output) .||. readyOut
    -- The running value with the registered beat folded in (an image's first
    -- beat starts it afresh).
    running   = step <$> count <*> held <*> (fromJustX <$> beat)
    step k acc x = if k == 0 then map start x else zipWith combine acc (map start x)
    -- No reset: 'count' says whether 'held' belongs to the current image.
    held :: Signal dom (Vec c r)
    held      = delayEn (deepErrorX "global: no beat yet") combines running
    -- Both candidates finished before the choice, each on a signal of its own: a 'finish' in
    -- each branch is shared by Clash into one after the choice, which puts the select (late:
    -- it waits for downstream's ready) before the rounding's carry chain (the transformer
    -- example on ECP5: 10.5 ns).
    output    = register Nothing
                  (nextOutput <$> output <*> readyOut <*> completes <*> pending <*> outFree
                              <*> (map finish <$> running) <*> (map finish <$> held))
    nextOutput out ready done wait free finished kept
      | done && free = Just finished
      | wait && free = Just kept
      | ready        = Nothing
      | otherwise    = out
