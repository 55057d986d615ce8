{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The dense (fully connected) layer controller.

A layer with @m@ neurons is computed @p@ neurons per cycle by @p@ processing
elements ("K2C.Filter") walking the @g@ words of its weight ROM
("K2C.Memory"); @g * p >= m@, and neurons past @m@ in the last word are
zero padding that is computed and dropped.

= Protocol and timing

The controller cycles through three phases:

* 'Idle': ready is high; the ROM address is 0, so word 0 is already waiting
  when an input vector arrives (prefetch).
* 'Busy' @k@, @k = 0 .. g-1@: word @k@ is at the ROM output; its @p@ neurons
  are computed, requantized/activated, and shifted into the result register,
  while word @k+1@ is addressed.
* 'Full': the output vector is shown until downstream takes it.

Ready is the registered phase only, never a function of the input's valid or
of downstream's ready, so chains of layers have no combinational ready path.

With the input accepted in cycle @t@:

* latency: the output is valid from cycle @t + g + 1@ (and moves then if
  downstream is ready);
* initiation interval: with downstream always ready the next input is
  accepted in cycle @t + g + 2@, so the layer takes one vector every @g + 2@
  cycles.

For a chain of layers (inputs back to back, downstream always ready) the
first output is valid @sum (g_i + 1)@ cycles after the first input is
accepted, and outputs follow every @max (g_i + 2)@ cycles. Each layer holds
one finished vector while 'Full', so when a later layer is the slowest the
earlier ones accept their next input ahead of it: accept cycles are then not
simply multiples of the interval. Example: @g = [3, 1]@ gives accepts at
@5i@ and outputs at @5i + 6@; @g = [1, 2]@ gives accepts at @0, 3, 7, 11, ..@
and outputs at @4i + 5@.
-}
module K2C.Dense
  ( Phase (..)
  , dense
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Filter (ExactAccumulator, filterBank)
import K2C.Memory (WeightRom, readWeights)
import K2C.Stream (Stream)

-- | Where the controller of a layer with @g@ ROM words is.
data Phase g
  = Idle            -- ^ waiting for an input vector (ready)
  | Busy (Index g)  -- ^ computing the neurons of this ROM word
  | Full            -- ^ holding the output vector until downstream takes it
  deriving (Eq, Show, Generic, NFDataX)

-- | A dense layer: @n@ inputs, @m@ outputs, @p@ neurons per cycle.
-- The function @activate@ is applied to every neuron's exact accumulator; it is
-- the layer's "requantize then activate" step.
dense
  :: forall dom g p n m ai af wi wf ci cf o
   . ( HiddenClockResetEnable dom
     , KnownNat g, KnownNat p, KnownNat n, KnownNat m
     , 1 <= g, m <= (g * p)
     , ExactAccumulator n ai af wi wf ci cf
     , NFDataX o )
  => SNat p
  -> WeightRom g p n (SFixed wi wf)
  -> (SFixed ci cf -> o)
  -> Stream dom (Vec n (SFixed ai af)) (Vec m o)
dense SNat weights activate (input, readyOut) = (output, readyIn)
  where
    phase     = register Idle (nextPhase <$> phase <*> accepted <*> delivered)
    readyIn   = (== Idle) <$> phase
    accepted  = readyIn .&&. (isJust <$> input)
    delivered = ((== Full) <$> phase) .&&. readyOut

    -- Datapath registers have no reset: the phase alone says whether their
    -- contents mean anything.
    held      = delayMaybe (deepErrorX "dense: no input accepted yet")
                           (mux readyIn input (pure Nothing))
    word      = readWeights weights (romAddress <$> phase)
    neurons   = map activate <$> (filterBank <$> held <*> word)
    results :: Signal dom (Vec g (Vec p o))
    results   = delayEn (deepErrorX "dense: no result computed yet")
                        (isBusy <$> phase)
                        ((<<+) <$> results <*> neurons)

    output    = mux ((== Full) <$> phase) (Just . dropPadding <$> results) (pure Nothing)

-- | The phase transition; see the module header for the schedule.
nextPhase :: KnownNat g => Phase g -> Bool -> Bool -> Phase g
nextPhase Idle     accepted _  | accepted  = Busy 0
nextPhase (Busy k) _         _ | k == maxBound = Full
                               | otherwise = Busy (k + 1)
nextPhase Full     _ delivered | delivered = Idle
nextPhase phase    _ _         = phase

-- | The ROM address to present this cycle: the word needed next cycle. Word 0
-- is prefetched whenever the next cycle cannot be in the middle of a walk.
romAddress :: KnownNat g => Phase g -> Index g
romAddress (Busy k) | k < maxBound = k + 1
romAddress _        = 0

isBusy :: Phase g -> Bool
isBusy (Busy _) = True
isBusy _        = False

-- | Flatten the per-word results (word 0 first) and drop the padding neurons
-- of the last word.
dropPadding
  :: forall g p m o . (KnownNat m, m <= (g * p))
  => Vec g (Vec p o) -> Vec m o
dropPadding results = leToPlus @m @(g * p) (takeI (concat results))
